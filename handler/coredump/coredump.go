// Package coredump reads a Linux ELF core dump, either as the forward-only
// stream the kernel writes into a core_pattern pipe or from a file.
//
// The kernel writes (fs/binfmt_elf.c, elf_core_dump): the ELF header, the
// program headers (PT_NOTE first, then one PT_LOAD per VMA), the note data,
// padding to a page, then each segment's data in program-header order. When
// there are more than 0xfffe segments, e_phnum is PN_XNUM and the real count
// is in section header 0's sh_info, which the kernel writes at the end of
// the core: the stream reader derives the count from the first PT_NOTE.
//
// ReadHeader reads everything up to the end of the notes; Stream.Collect
// then walks the segment data once, keeping only the address ranges asked
// for and discarding the rest without copying it where the kernel lets us.
package coredump

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/unwound-dev/unwound/elf"
)

// FormatError says what is wrong with a core, and where.
type FormatError struct {
	Off int64
	Msg string
}

func (e *FormatError) Error() string { return fmt.Sprintf("core: offset %#x: %s", e.Off, e.Msg) }

// Limits bound what a core may make the reader allocate.
type Limits struct {
	MaxThreads   int   // NT_PRSTATUS notes kept
	MaxNoteBytes int64 // total PT_NOTE bytes read
	MaxSegments  int   // program headers
	MaxFiles     int   // NT_FILE entries
}

// DefaultLimits are generous for real processes and small for hostile ones.
var DefaultLimits = Limits{MaxThreads: 1024, MaxNoteBytes: 16 << 20, MaxSegments: 1 << 17, MaxFiles: 1 << 16}

// Core is what the headers and notes of a core say.
type Core struct {
	Class    elf.Class
	Machine  elf.Machine
	Order    binary.ByteOrder
	Threads  []Thread // the crashing thread first, as the kernel writes it
	PRPSInfo *PRPSInfo
	SigInfo  *SigInfo
	Auxv     []AuxEntry
	Files    []FileMapping // NT_FILE
	Segments []Segment     // PT_LOAD, in file order
	// Skipped counts notes that were not understood or over a limit.
	Skipped int
}

// Thread is one NT_PRSTATUS.
type Thread struct {
	TID    int
	Signal int      // pr_cursig
	Regs   []uint64 // pr_reg words in the kernel's order, zero-extended
	// PACMask is the NT_ARM_PAC_MASK insn mask (AArch64), 0 when absent.
	PACMask uint64
}

// PRPSInfo is NT_PRPSINFO.
type PRPSInfo struct {
	PID, PPID int
	UID, GID  uint32
	Fname     string // comm
	Args      string // the first 80 bytes of argv, space-separated
}

// SigInfo is the part of NT_SIGINFO the report uses.
type SigInfo struct {
	Signo, Errno, Code int32
	Addr               uint64 // si_addr, meaningful for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP
}

// AuxEntry is one NT_AUXV pair.
type AuxEntry struct{ Tag, Val uint64 }

// FileMapping is one NT_FILE entry.
type FileMapping struct {
	Start, End, Offset uint64 // Offset in bytes
	Path               string
}

// Segment is one PT_LOAD.
type Segment struct {
	Vaddr, Memsz, Offset, Filesz uint64
	Flags                        elf.ProgFlag
}

// AuxvValue returns the value of an auxv tag.
func (c *Core) AuxvValue(tag uint64) (uint64, bool) {
	for _, a := range c.Auxv {
		if a.Tag == tag {
			return a.Val, true
		}
	}
	return 0, false
}

// Note types (include/uapi/linux/elf.h).
const (
	ntPRStatus   = 1
	ntPRFPReg    = 2
	ntPRPSInfo   = 3
	ntAuxv       = 6
	ntSigInfo    = 0x53494749
	ntFile       = 0x46494c45
	ntARMPACMask = 0x406
)

// Auxiliary vector tags (include/uapi/linux/auxvec.h).
const (
	AT_PAGESZ       = 6  // the page size
	AT_ENTRY        = 9  // the program's entry point
	AT_EXECFN       = 31 // the program's file name, on the stack's top page
	AT_SYSINFO_EHDR = 33 // the vDSO's base
)

type header struct {
	class   elf.Class
	order   binary.ByteOrder
	machine elf.Machine
	phoff   uint64
	shoff   uint64
	phentsz uint64
	phnum   uint64
	shentsz uint64
}

func parseIdent(b []byte) (*header, error) {
	if len(b) < 16 || !bytes.Equal(b[:4], []byte(elf.ELFMAG)) {
		return nil, &FormatError{0, "not an ELF file"}
	}
	h := &header{class: elf.Class(b[elf.EI_CLASS])}
	switch elf.Data(b[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		h.order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		h.order = binary.BigEndian
	default:
		return nil, &FormatError{elf.EI_DATA, "bad data encoding"}
	}
	if h.class != elf.ELFCLASS32 && h.class != elf.ELFCLASS64 {
		return nil, &FormatError{elf.EI_CLASS, "bad class"}
	}
	return h, nil
}

func (h *header) parse(b []byte) error {
	o := h.order
	if elf.Type(o.Uint16(b[16:])) != elf.ET_CORE {
		return &FormatError{16, fmt.Sprintf("not a core file (e_type %v)", elf.Type(o.Uint16(b[16:])))}
	}
	h.machine = elf.Machine(o.Uint16(b[18:]))
	if h.class == elf.ELFCLASS64 {
		h.phoff, h.shoff = o.Uint64(b[32:]), o.Uint64(b[40:])
		h.phentsz, h.phnum, h.shentsz = uint64(o.Uint16(b[54:])), uint64(o.Uint16(b[56:])), uint64(o.Uint16(b[58:]))
		if h.phentsz != 56 {
			return &FormatError{54, fmt.Sprintf("e_phentsize %d, want 56", h.phentsz)}
		}
	} else {
		h.phoff, h.shoff = uint64(o.Uint32(b[28:])), uint64(o.Uint32(b[32:]))
		h.phentsz, h.phnum, h.shentsz = uint64(o.Uint16(b[42:])), uint64(o.Uint16(b[44:])), uint64(o.Uint16(b[46:]))
		if h.phentsz != 32 {
			return &FormatError{42, fmt.Sprintf("e_phentsize %d, want 32", h.phentsz)}
		}
	}
	return nil
}

func (h *header) ehsize() int {
	if h.class == elf.ELFCLASS64 {
		return 64
	}
	return 52
}

type prog struct {
	typ                       elf.ProgType
	flags                     elf.ProgFlag
	off, vaddr, filesz, memsz uint64
}

func (h *header) parseProg(b []byte) prog {
	o := h.order
	if h.class == elf.ELFCLASS64 {
		return prog{elf.ProgType(o.Uint32(b)), elf.ProgFlag(o.Uint32(b[4:])), o.Uint64(b[8:]), o.Uint64(b[16:]), o.Uint64(b[32:]), o.Uint64(b[40:])}
	}
	return prog{elf.ProgType(o.Uint32(b)), elf.ProgFlag(o.Uint32(b[24:])), uint64(o.Uint32(b[4:])), uint64(o.Uint32(b[8:])), uint64(o.Uint32(b[16:])), uint64(o.Uint32(b[20:]))}
}
