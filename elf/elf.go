// Package elf reads the parts of ELF files the handler needs: the file
// header, program headers, section headers with their names, section and
// segment data, and notes (the GNU build ID). Names mirror the System V
// gABI ("Object Files") and debug/elf, so a reader of either finds the code.
//
// Why not debug/elf: it links debug/dwarf, compress/zlib, compress/flate and
// internal/zstd (docs/design.md, "Footprint") for compressed
// sections and DWARF the handler never reads, and it trusts the counts in
// the headers. Here the input is hostile (files mapped by a crashing,
// possibly compromised process): every count, offset and size is checked
// against the file's real size before anything is allocated, and malformed
// input is a *FormatError that says where. Compressed sections
// (SHF_COMPRESSED) are not decompressed: Section.Data reports them as
// unsupported.
package elf

import "strconv"

// Identification (gABI "ELF Identification").
const (
	ELFMAG        = "\x7fELF"
	EI_CLASS      = 4
	EI_DATA       = 5
	EI_VERSION    = 6
	EI_OSABI      = 7
	EI_ABIVERSION = 8
	EI_NIDENT     = 16

	EV_CURRENT = 1
)

// Class is EI_CLASS: the file's word size.
type Class byte

const (
	ELFCLASSNONE Class = 0
	ELFCLASS32   Class = 1
	ELFCLASS64   Class = 2
)

// Data is EI_DATA: the file's byte order.
type Data byte

const (
	ELFDATANONE Data = 0
	ELFDATA2LSB Data = 1
	ELFDATA2MSB Data = 2
)

// Type is e_type.
type Type uint16

const (
	ET_NONE Type = 0
	ET_REL  Type = 1
	ET_EXEC Type = 2
	ET_DYN  Type = 3
	ET_CORE Type = 4
)

// Machine is e_machine.
type Machine uint16

const (
	EM_NONE       Machine = 0
	EM_SPARC      Machine = 2
	EM_386        Machine = 3
	EM_68K        Machine = 4
	EM_MIPS       Machine = 8
	EM_PARISC     Machine = 15
	EM_PPC        Machine = 20
	EM_PPC64      Machine = 21
	EM_S390       Machine = 22
	EM_ARM        Machine = 40
	EM_SH         Machine = 42
	EM_SPARCV9    Machine = 43
	EM_IA_64      Machine = 50
	EM_X86_64     Machine = 62
	EM_OPENRISC   Machine = 92
	EM_ARC        Machine = 93
	EM_XTENSA     Machine = 94
	EM_NIOS2      Machine = 113
	EM_AARCH64    Machine = 183
	EM_MICROBLAZE Machine = 189
	EM_ARC_HS     Machine = 195
	EM_RISCV      Machine = 243
	EM_BPF        Machine = 247
	EM_CSKY       Machine = 252
	EM_LOONGARCH  Machine = 258
)

// ProgType is p_type.
type ProgType uint32

const (
	PT_NULL         ProgType = 0
	PT_LOAD         ProgType = 1
	PT_DYNAMIC      ProgType = 2
	PT_INTERP       ProgType = 3
	PT_NOTE         ProgType = 4
	PT_SHLIB        ProgType = 5
	PT_PHDR         ProgType = 6
	PT_TLS          ProgType = 7
	PT_GNU_EH_FRAME ProgType = 0x6474e550
	PT_GNU_STACK    ProgType = 0x6474e551
	PT_GNU_RELRO    ProgType = 0x6474e552
	PT_GNU_PROPERTY ProgType = 0x6474e553
	PT_ARM_EXIDX    ProgType = 0x70000001
)

// ProgFlag is p_flags.
type ProgFlag uint32

const (
	PF_X ProgFlag = 1
	PF_W ProgFlag = 2
	PF_R ProgFlag = 4
)

// SectionType is sh_type.
type SectionType uint32

const (
	SHT_NULL           SectionType = 0
	SHT_PROGBITS       SectionType = 1
	SHT_SYMTAB         SectionType = 2
	SHT_STRTAB         SectionType = 3
	SHT_RELA           SectionType = 4
	SHT_HASH           SectionType = 5
	SHT_DYNAMIC        SectionType = 6
	SHT_NOTE           SectionType = 7
	SHT_NOBITS         SectionType = 8
	SHT_REL            SectionType = 9
	SHT_DYNSYM         SectionType = 11
	SHT_INIT_ARRAY     SectionType = 14
	SHT_FINI_ARRAY     SectionType = 15
	SHT_GNU_HASH       SectionType = 0x6ffffff6
	SHT_ARM_EXIDX      SectionType = 0x70000001
	SHT_ARM_ATTRIBUTES SectionType = 0x70000003
)

// SectionFlag is sh_flags.
type SectionFlag uint32

const (
	SHF_WRITE      SectionFlag = 0x1
	SHF_ALLOC      SectionFlag = 0x2
	SHF_EXECINSTR  SectionFlag = 0x4
	SHF_COMPRESSED SectionFlag = 0x800
)

// SectionIndex is a section header index as symbols and the ELF header
// carry it.
type SectionIndex int

const (
	SHN_UNDEF     SectionIndex = 0
	SHN_LORESERVE SectionIndex = 0xff00
	SHN_XINDEX    SectionIndex = 0xffff
)

// PN_XNUM in e_phnum says the program header count is in section header
// 0's sh_info (gABI "Extended Program Header Numbering").
const PN_XNUM = 0xffff

// Note types of core files and of the GNU toolchain
// (include/uapi/linux/elf.h; binutils include/elf/common.h).
const (
	NT_PRSTATUS     = 1
	NT_PRPSINFO     = 3
	NT_GNU_BUILD_ID = 3 // owner "GNU"
)

// DynTag is d_tag of a dynamic section entry.
type DynTag int

const (
	DT_NULL  DynTag = 0
	DT_DEBUG DynTag = 21
)

// SymType is the type half of st_info.
type SymType int

const (
	STT_NOTYPE SymType = 0
	STT_OBJECT SymType = 1
	STT_FUNC   SymType = 2
)

// ST_TYPE is the type of a symbol's st_info.
func ST_TYPE(info uint8) SymType { return SymType(info & 0xf) }

type name struct {
	v uint32
	s string
}

// lookup names v as readelf would, or gives its number.
func lookup(v uint32, names []name) string {
	for _, n := range names {
		if n.v == v {
			return n.s
		}
	}
	return strconv.FormatUint(uint64(v), 10)
}

var classNames = []name{{0, "ELFCLASSNONE"}, {1, "ELFCLASS32"}, {2, "ELFCLASS64"}}

func (c Class) String() string { return lookup(uint32(c), classNames) }

var dataNames = []name{{0, "ELFDATANONE"}, {1, "ELFDATA2LSB"}, {2, "ELFDATA2MSB"}}

func (d Data) String() string { return lookup(uint32(d), dataNames) }

var typeNames = []name{{0, "ET_NONE"}, {1, "ET_REL"}, {2, "ET_EXEC"}, {3, "ET_DYN"}, {4, "ET_CORE"}}

func (t Type) String() string { return lookup(uint32(t), typeNames) }

// The machines Linux runs on; others print as numbers.
var machineNames = []name{
	{0, "EM_NONE"}, {2, "EM_SPARC"}, {3, "EM_386"}, {4, "EM_68K"}, {8, "EM_MIPS"},
	{15, "EM_PARISC"}, {20, "EM_PPC"}, {21, "EM_PPC64"}, {22, "EM_S390"}, {40, "EM_ARM"},
	{42, "EM_SH"}, {43, "EM_SPARCV9"}, {50, "EM_IA_64"}, {62, "EM_X86_64"},
	{92, "EM_OPENRISC"}, {93, "EM_ARC"}, {94, "EM_XTENSA"}, {113, "EM_NIOS2"},
	{183, "EM_AARCH64"}, {189, "EM_MICROBLAZE"}, {195, "EM_ARC_HS"}, {243, "EM_RISCV"},
	{247, "EM_BPF"}, {252, "EM_CSKY"}, {258, "EM_LOONGARCH"},
}

func (m Machine) String() string { return lookup(uint32(m), machineNames) }

var progTypeNames = []name{
	{0, "PT_NULL"}, {1, "PT_LOAD"}, {2, "PT_DYNAMIC"}, {3, "PT_INTERP"}, {4, "PT_NOTE"},
	{5, "PT_SHLIB"}, {6, "PT_PHDR"}, {7, "PT_TLS"}, {0x6474e550, "PT_GNU_EH_FRAME"},
	{0x6474e551, "PT_GNU_STACK"}, {0x6474e552, "PT_GNU_RELRO"}, {0x6474e553, "PT_GNU_PROPERTY"},
	{0x70000001, "PT_ARM_EXIDX"},
}

func (t ProgType) String() string { return lookup(uint32(t), progTypeNames) }

var sectionTypeNames = []name{
	{0, "SHT_NULL"}, {1, "SHT_PROGBITS"}, {2, "SHT_SYMTAB"}, {3, "SHT_STRTAB"}, {4, "SHT_RELA"},
	{5, "SHT_HASH"}, {6, "SHT_DYNAMIC"}, {7, "SHT_NOTE"}, {8, "SHT_NOBITS"}, {9, "SHT_REL"},
	{11, "SHT_DYNSYM"}, {14, "SHT_INIT_ARRAY"}, {15, "SHT_FINI_ARRAY"},
	{0x6ffffff6, "SHT_GNU_HASH"}, {0x70000001, "SHT_ARM_EXIDX"}, {0x70000003, "SHT_ARM_ATTRIBUTES"},
}

func (t SectionType) String() string { return lookup(uint32(t), sectionTypeNames) }
