package elf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/unwound-dev/unwound/internal/regular"
)

// Limits on what a file may make NewFile allocate beyond its size: real
// executables and libraries have a dozen program headers and a few dozen
// sections with a few hundred bytes of names.
const (
	MaxProgs     = 1 << 16
	MaxSections  = 1 << 16
	MaxNameTable = 1 << 20 // bytes of the section name string table, and of all names
)

// FormatError says what is wrong with a file, and where.
type FormatError struct {
	Off int64 // file offset of the bad record or field
	Msg string
}

func (e *FormatError) Error() string { return fmt.Sprintf("elf: offset %#x: %s", e.Off, e.Msg) }

// errAt is called on error paths only, from many places: not inlined, so
// that each call is a call, not a copy (docs/design.md, "Footprint").
//
//go:noinline
func errAt(off uint64, format string, args ...any) error {
	return &FormatError{int64(off), fmt.Sprintf(format, args...)}
}

// ErrCompressed is returned (wrapped) by Section.Data for SHF_COMPRESSED
// sections: the handler carries no decompressor.
var ErrCompressed = errors.New("compressed section (SHF_COMPRESSED) not supported")

// FileHeader is the ELF header (gABI "ELF Header") without the layout of
// the header tables, which NewFile resolves into Progs and Sections.
type FileHeader struct {
	Class      Class
	Data       Data
	Version    uint8 // EI_VERSION
	OSABI      uint8
	ABIVersion uint8
	ByteOrder  binary.ByteOrder
	Type       Type
	Machine    Machine
	Entry      uint64
}

// File is an open ELF file.
type File struct {
	FileHeader
	Progs    []*Prog
	Sections []*Section

	r      io.ReaderAt
	size   int64
	closer io.Closer
}

// ProgHeader is a program header (gABI "Program Header").
type ProgHeader struct {
	Type   ProgType
	Flags  ProgFlag
	Off    uint64
	Vaddr  uint64
	Paddr  uint64
	Filesz uint64
	Memsz  uint64
	Align  uint64
}

// Prog is a program header and the segment's bytes in the file.
type Prog struct {
	ProgHeader
	f *File
}

// SectionHeader is a section header (gABI "Sections") with its name.
// FileSize is the bytes the section occupies in the file: Size, or 0 for
// SHT_NOBITS. Compressed sections are not decompressed: Size is sh_size.
type SectionHeader struct {
	Name      string
	Type      SectionType
	Flags     SectionFlag
	Addr      uint64
	Offset    uint64
	Size      uint64
	Link      uint32
	Info      uint32
	Addralign uint64
	Entsize   uint64
	FileSize  uint64
}

// Section is a section header and the section's bytes in the file.
type Section struct {
	SectionHeader
	f *File
}

// Header sizes (gABI): ELF header, program header, section header.
func (c Class) sizes() (eh, ph, sh int) {
	if c == ELFCLASS64 {
		return 64, 56, 64
	}
	return 52, 32, 40
}

// Open opens the named file and reads its headers. Only a regular file
// is opened, and without blocking: a name from a command line, a sysroot
// or a crashed process's memory may be a FIFO that no one ever writes.
func Open(name string) (*File, error) {
	fd, err := regular.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, err
	}
	f, err := NewFile(fd, st.Size())
	if err != nil {
		fd.Close()
		return nil, err
	}
	f.closer = fd
	return f, nil
}

// Close closes the file Open opened; it does nothing for NewFile's.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// NewFile reads the headers of the ELF file in r, which holds size bytes,
// and keeps r for Data. Counts and offsets are checked against size before
// anything is read or allocated.
func NewFile(r io.ReaderAt, size int64) (*File, error) {
	f := &File{r: r, size: size}
	h, err := f.readHeader()
	if err != nil {
		return nil, err
	}
	if err := f.extended(&h); err != nil {
		return nil, err
	}
	if err := f.readProgs(&h); err != nil {
		return nil, err
	}
	if err := f.readSections(&h); err != nil {
		return nil, err
	}
	return f, nil
}

// header is what NewFile keeps of the ELF header for the tables: where
// they are, their counts and entry sizes (and the sizes this reader
// decodes), and the file offset of e_flags, for errors.
type header struct {
	phoff, shoff               uint64
	phentsize, phnum           int
	shentsize, shnum, shstrndx int
	hoff                       uint64
	wantPh, wantSh             int
}

// readHeader reads and checks the ELF header.
func (f *File) readHeader() (header, error) {
	var h header
	size := f.size
	if size < 0 {
		return h, errAt(0, "negative file size %d", size)
	}
	var hb [64]byte
	n := len(hb)
	if size < int64(n) {
		n = int(size)
	}
	if err := f.readAt(hb[:n], 0); err != nil {
		return h, err
	}
	b := hb[:n]
	if len(b) < EI_NIDENT {
		return h, errAt(0, "file of %d bytes", size)
	}
	if string(b[:4]) != ELFMAG {
		return h, errAt(0, "bad magic number (not an ELF file)")
	}
	f.Class = Class(b[EI_CLASS])
	if f.Class != ELFCLASS32 && f.Class != ELFCLASS64 {
		return h, errAt(EI_CLASS, "unknown ELF class %d", b[EI_CLASS])
	}
	f.Data = Data(b[EI_DATA])
	switch f.Data {
	case ELFDATA2LSB:
		f.ByteOrder = binary.LittleEndian
	case ELFDATA2MSB:
		f.ByteOrder = binary.BigEndian
	default:
		return h, errAt(EI_DATA, "unknown ELF data encoding %d", b[EI_DATA])
	}
	f.Version = b[EI_VERSION]
	if f.Version != EV_CURRENT {
		return h, errAt(EI_VERSION, "unknown ELF version %d", f.Version)
	}
	f.OSABI, f.ABIVersion = b[EI_OSABI], b[EI_ABIVERSION]
	ehsize, wantPh, wantSh := f.Class.sizes()
	h.wantPh, h.wantSh = wantPh, wantSh
	if len(b) < ehsize {
		return h, errAt(0, "%s header of %d bytes in a file of %d", f.Class, ehsize, size)
	}
	o := f.ByteOrder
	f.Type, f.Machine = Type(o.Uint16(b[16:])), Machine(o.Uint16(b[18:]))
	var version uint32
	var e []byte // e_flags onwards
	wordSize := 4
	if f.Class == ELFCLASS64 {
		wordSize = 8
		version, f.Entry, h.phoff, h.shoff = o.Uint32(b[20:]), o.Uint64(b[24:]), o.Uint64(b[32:]), o.Uint64(b[40:])
		e = b[48:]
	} else {
		version, f.Entry, h.phoff, h.shoff = o.Uint32(b[20:]), uint64(o.Uint32(b[24:])), uint64(o.Uint32(b[28:])), uint64(o.Uint32(b[32:]))
		e = b[36:]
	}
	if version != uint32(f.Version) {
		return h, errAt(20, "e_version %d does not match EI_VERSION %d", version, f.Version)
	}
	// e: e_flags, e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx.
	h.phentsize, h.phnum = int(o.Uint16(e[6:])), int(o.Uint16(e[8:]))
	h.shentsize, h.shnum, h.shstrndx = int(o.Uint16(e[10:])), int(o.Uint16(e[12:])), int(o.Uint16(e[14:]))
	h.hoff = uint64(ehsize - len(e)) // file offset of e_flags
	if int64(h.phoff) < 0 || int64(h.shoff) < 0 {
		return h, errAt(h.hoff-uint64(2*wordSize), "e_phoff %#x or e_shoff %#x above 2^63", h.phoff, h.shoff)
	}
	if h.shoff == 0 && h.shnum != 0 {
		return h, errAt(h.hoff+12, "e_shnum %d without a section header table", h.shnum)
	}
	if h.shnum > 0 && h.shstrndx >= h.shnum {
		return h, errAt(h.hoff+14, "e_shstrndx %d out of range (e_shnum %d)", h.shstrndx, h.shnum)
	}
	if h.phnum > 0 && h.phentsize < h.wantPh {
		return h, errAt(h.hoff+6, "e_phentsize %d, want at least %d", h.phentsize, h.wantPh)
	}
	return h, nil
}

// extended applies the gABI's extended numbering and the reader's limits
// to the counts.
func (f *File) extended(h *header) error {
	// Extended numbering (gABI "Extended Section Header Numbering",
	// "Extended Program Header Numbering"): counts and the name table's
	// index that do not fit the ELF header live in section header 0.
	extSections := h.shoff != 0 && h.shnum == 0
	if extSections || (h.shoff != 0 && h.phnum == PN_XNUM) {
		s0, err := f.readTable("section header 0", h.shoff, 1, h.wantSh, h.wantSh)
		if err != nil {
			return err
		}
		sh := f.parseSection(s0)
		if extSections {
			if sh.Type != SHT_NULL {
				return errAt(h.shoff, "section header 0 of type %s holds the section count", sh.Type)
			}
			if sh.Size < uint64(SHN_LORESERVE) || sh.Size > 1<<32-1 {
				return errAt(h.shoff, "extended section count %d", sh.Size)
			}
			h.shnum = int(sh.Size)
			if h.shstrndx == int(SHN_XINDEX) {
				h.shstrndx = int(sh.Link)
				if h.shstrndx < int(SHN_LORESERVE) {
					return errAt(h.shoff, "extended e_shstrndx %d", h.shstrndx)
				}
			}
		}
		if h.phnum == PN_XNUM {
			h.phnum = int(sh.Info)
		}
	}
	if h.phnum > MaxProgs {
		return errAt(h.hoff+8, "%d program headers, limit %d", h.phnum, MaxProgs)
	}
	if h.shnum > MaxSections {
		return errAt(h.hoff+12, "%d section headers, limit %d", h.shnum, MaxSections)
	}
	if h.shnum > 0 && h.shentsize < h.wantSh {
		return errAt(h.hoff+10, "e_shentsize %d, want at least %d", h.shentsize, h.wantSh)
	}
	return nil
}

// readProgs reads the program header table.
func (f *File) readProgs(h *header) error {
	if h.phnum > 0 {
		t, err := f.readTable("program header table", h.phoff, h.phnum, h.phentsize, h.wantPh)
		if err != nil {
			return err
		}
		f.Progs = make([]*Prog, h.phnum)
		for i := range f.Progs {
			p := &Prog{ProgHeader: f.parseProg(t[i*h.wantPh:]), f: f}
			off := h.phoff + uint64(i*h.phentsize)
			if int64(p.Off) < 0 || int64(p.Filesz) < 0 {
				return errAt(off, "program header %d: p_offset %#x, p_filesz %#x", i, p.Off, p.Filesz)
			}
			f.Progs[i] = p
		}
	}
	return nil
}

// readSections reads the section header table and the sections' names.
func (f *File) readSections(h *header) error {
	o := f.ByteOrder
	if h.shnum == 0 {
		return nil
	}
	t, err := f.readTable("section header table", h.shoff, h.shnum, h.shentsize, h.wantSh)
	if err != nil {
		return err
	}
	f.Sections = make([]*Section, h.shnum)
	names := make([]uint32, h.shnum)
	for i := range f.Sections {
		b := t[i*h.wantSh:]
		s := &Section{SectionHeader: f.parseSection(b), f: f}
		names[i] = o.Uint32(b)
		if int64(s.Offset) < 0 || int64(s.Size) < 0 {
			return errAt(h.shoff+uint64(i*h.shentsize), "section header %d: sh_offset %#x, sh_size %#x", i, s.Offset, s.Size)
		}
		f.Sections[i] = s
	}
	if h.shstrndx == 0 {
		return nil // SHN_UNDEF: no names
	}
	if h.shstrndx >= h.shnum {
		return errAt(h.shoff, "section name table index %d out of range (%d sections)", h.shstrndx, h.shnum)
	}
	st := f.Sections[h.shstrndx]
	stOff := h.shoff + uint64(h.shstrndx*h.shentsize)
	if st.Type != SHT_STRTAB {
		return errAt(stOff, "section name table %d of type %s", h.shstrndx, st.Type)
	}
	if st.FileSize > MaxNameTable {
		return errAt(stOff, "section name table of %d bytes, limit %d", st.FileSize, MaxNameTable)
	}
	strtab, err := st.Data()
	if err != nil {
		return err
	}
	total := 0 // bytes of names made: every header may name the longest
	for i, s := range f.Sections {
		name, ok := cString(strtab, names[i])
		if !ok {
			return errAt(h.shoff+uint64(i*h.shentsize), "section header %d: name at %d outside the section name table (%d bytes)", i, names[i], len(strtab))
		}
		if total += len(name); total > MaxNameTable {
			return errAt(h.shoff+uint64(i*h.shentsize), "section names of more than %d bytes in all", MaxNameTable)
		}
		s.Name = name
	}
	return nil
}

// readTable reads the table what, n entries of ent bytes at off, and
// returns the first want bytes of each, packed. A table that runs past
// the end of the file is refused before anything is allocated. Wide
// entries are read a chunk of at most 64 KiB (or one entry) at a time.
func (f *File) readTable(what string, off uint64, n, ent, want int) ([]byte, error) {
	total := uint64(n) * uint64(ent) // n and ent are below 2^32 and 2^16
	if off > uint64(f.size) || total > uint64(f.size)-off {
		return nil, errAt(off, "%s (%d × %d bytes) runs past the end of the file (%d bytes)", what, n, ent, f.size)
	}
	out := make([]byte, n*want)
	if ent == want {
		return out, f.readAt(out, off)
	}
	per := max(1, (64<<10)/ent) // entries per read
	buf := make([]byte, min(n, per)*ent)
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		chunk := buf[:k*ent]
		if err := f.readAt(chunk, off+uint64(i*ent)); err != nil {
			return nil, err
		}
		for j := 0; j < k; j++ {
			copy(out[(i+j)*want:(i+j+1)*want], chunk[j*ent:])
		}
	}
	return out, nil
}

func (f *File) readAt(p []byte, off uint64) error {
	n, err := f.r.ReadAt(p, int64(off))
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("elf: reading %d bytes at %#x: %w", len(p), off, err)
}

// data reads n bytes at off, after checking they lie inside the file.
func (f *File) data(off, n uint64, what string) ([]byte, error) {
	if n == 0 {
		return []byte{}, nil
	}
	if off > uint64(f.size) || n > uint64(f.size)-off {
		return nil, errAt(off, "%s: %d bytes run past the end of the file (%d bytes)", what, n, f.size)
	}
	b := make([]byte, n)
	return b, f.readAt(b, off)
}

func (f *File) parseProg(b []byte) ProgHeader {
	o := f.ByteOrder
	if f.Class == ELFCLASS64 {
		return ProgHeader{Type: ProgType(o.Uint32(b)), Flags: ProgFlag(o.Uint32(b[4:])),
			Off: o.Uint64(b[8:]), Vaddr: o.Uint64(b[16:]), Paddr: o.Uint64(b[24:]),
			Filesz: o.Uint64(b[32:]), Memsz: o.Uint64(b[40:]), Align: o.Uint64(b[48:])}
	}
	return ProgHeader{Type: ProgType(o.Uint32(b)), Off: uint64(o.Uint32(b[4:])),
		Vaddr: uint64(o.Uint32(b[8:])), Paddr: uint64(o.Uint32(b[12:])),
		Filesz: uint64(o.Uint32(b[16:])), Memsz: uint64(o.Uint32(b[20:])),
		Flags: ProgFlag(o.Uint32(b[24:])), Align: uint64(o.Uint32(b[28:]))}
}

// parseSection decodes a section header, all but its name.
func (f *File) parseSection(b []byte) SectionHeader {
	o := f.ByteOrder
	var s SectionHeader
	if f.Class == ELFCLASS64 {
		s = SectionHeader{Type: SectionType(o.Uint32(b[4:])), Flags: SectionFlag(o.Uint64(b[8:])),
			Addr: o.Uint64(b[16:]), Offset: o.Uint64(b[24:]), Size: o.Uint64(b[32:]),
			Link: o.Uint32(b[40:]), Info: o.Uint32(b[44:]), Addralign: o.Uint64(b[48:]), Entsize: o.Uint64(b[56:])}
	} else {
		s = SectionHeader{Type: SectionType(o.Uint32(b[4:])), Flags: SectionFlag(o.Uint32(b[8:])),
			Addr: uint64(o.Uint32(b[12:])), Offset: uint64(o.Uint32(b[16:])), Size: uint64(o.Uint32(b[20:])),
			Link: o.Uint32(b[24:]), Info: o.Uint32(b[28:]), Addralign: uint64(o.Uint32(b[32:])), Entsize: uint64(o.Uint32(b[36:]))}
	}
	if s.Type != SHT_NOBITS {
		s.FileSize = s.Size
	}
	return s
}

// cString is the NUL-terminated string at off in tab.
func cString(tab []byte, off uint32) (string, bool) {
	if uint64(off) >= uint64(len(tab)) {
		return "", false
	}
	i := bytes.IndexByte(tab[off:], 0)
	if i < 0 {
		return "", false
	}
	return string(tab[off : int(off)+i]), true
}

// Section returns the first section with the given name, or nil.
func (f *File) Section(name string) *Section {
	for _, s := range f.Sections {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// SectionByType returns the first section of the given type, or nil.
func (f *File) SectionByType(t SectionType) *Section {
	for _, s := range f.Sections {
		if s.Type == t {
			return s
		}
	}
	return nil
}

// Data reads the section's bytes. SHT_NOBITS sections have none in the
// file, and compressed ones are not supported: both are errors.
func (s *Section) Data() ([]byte, error) {
	if s.Type == SHT_NOBITS {
		return nil, fmt.Errorf("elf: section %q is SHT_NOBITS: no data in the file", s.Name)
	}
	if s.Flags&SHF_COMPRESSED != 0 {
		return nil, fmt.Errorf("elf: section %q: %w", s.Name, ErrCompressed)
	}
	return s.f.data(s.Offset, s.FileSize, "section "+s.Name)
}

// Data reads the segment's bytes in the file (p_filesz at p_offset).
func (p *Prog) Data() ([]byte, error) {
	return p.f.data(p.Off, p.Filesz, "segment "+p.Type.String())
}

// Open returns a reader of the segment's bytes in the file.
func (p *Prog) Open() *io.SectionReader {
	return io.NewSectionReader(p.f.r, int64(p.Off), int64(p.Filesz))
}
