package elf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// A small ELF file builder for hostile headers: the ELF header, program
// headers right after it, section data, the section name table, and the
// section headers last.
type sec struct {
	name  string
	typ   elf.SectionType
	flags elf.SectionFlag
	addr  uint64
	data  []byte
}

type image struct {
	class elf.Class
	order binary.ByteOrder
	progs []elf.ProgHeader
	secs  []sec // section 0 (SHT_NULL) and .shstrtab are added
}

// Field offsets in the ELF header, 32-bit then 64-bit.
type field struct{ off32, off64, size32, size64 int }

var (
	fPhoff     = field{28, 32, 4, 8}
	fShoff     = field{32, 40, 4, 8}
	fPhentsize = field{42, 54, 2, 2}
	fPhnum     = field{44, 56, 2, 2}
	fShentsize = field{46, 58, 2, 2}
	fShnum     = field{48, 60, 2, 2}
	fShstrndx  = field{50, 62, 2, 2}
)

func put(o binary.ByteOrder, b []byte, size int, v uint64) {
	switch size {
	case 2:
		o.PutUint16(b, uint16(v))
	case 4:
		o.PutUint32(b, uint32(v))
	default:
		o.PutUint64(b, v)
	}
}

// set overwrites a header field of a built file.
func set(b []byte, f field, v uint64) []byte {
	b = append([]byte(nil), b...)
	o := order(b)
	if b[elf.EI_CLASS] == byte(elf.ELFCLASS64) {
		put(o, b[f.off64:], f.size64, v)
	} else {
		put(o, b[f.off32:], f.size32, v)
	}
	return b
}

func order(b []byte) binary.ByteOrder {
	if b[elf.EI_DATA] == byte(elf.ELFDATA2MSB) {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

func (m image) sizes() (eh, ph, sh int) {
	if m.class == elf.ELFCLASS64 {
		return 64, 56, 64
	}
	return 52, 32, 40
}

// build lays the file out; it also returns the section headers' offset.
func (m image) build() ([]byte, uint64) {
	eh, ph, sh := m.sizes()
	is64 := m.class == elf.ELFCLASS64
	o := m.order
	secs := append([]sec{{}}, m.secs...)
	var names bytes.Buffer
	names.WriteByte(0)
	nameOff := make([]uint32, len(secs)+1)
	for i, s := range secs[1:] {
		nameOff[i+1] = uint32(names.Len())
		names.WriteString(s.name + "\x00")
	}
	nameOff[len(secs)] = uint32(names.Len())
	names.WriteString(".shstrtab\x00")
	secs = append(secs, sec{name: ".shstrtab", typ: elf.SHT_STRTAB, data: names.Bytes()})

	b := make([]byte, eh+ph*len(m.progs))
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS] = byte(m.class)
	b[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	if o == binary.BigEndian {
		b[elf.EI_DATA] = byte(elf.ELFDATA2MSB)
	}
	b[elf.EI_VERSION] = elf.EV_CURRENT
	o.PutUint16(b[16:], uint16(elf.ET_DYN))
	o.PutUint16(b[18:], uint16(elf.EM_ARM))
	o.PutUint32(b[20:], elf.EV_CURRENT)
	for i, p := range m.progs {
		e := b[eh+i*ph:]
		o.PutUint32(e, uint32(p.Type))
		if is64 {
			o.PutUint32(e[4:], uint32(p.Flags))
			for j, v := range []uint64{p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz, p.Align} {
				o.PutUint64(e[8+8*j:], v)
			}
		} else {
			for j, v := range []uint64{p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz, uint64(p.Flags), p.Align} {
				o.PutUint32(e[4+4*j:], uint32(v))
			}
		}
	}
	offs := make([]uint64, len(secs))
	for i, s := range secs[1:] {
		for len(b)%8 != 0 {
			b = append(b, 0)
		}
		offs[i+1] = uint64(len(b))
		b = append(b, s.data...)
	}
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	shoff := uint64(len(b))
	for i, s := range secs {
		e := make([]byte, sh)
		o.PutUint32(e, nameOff[i])
		o.PutUint32(e[4:], uint32(s.typ))
		if is64 {
			o.PutUint64(e[8:], uint64(s.flags))
			o.PutUint64(e[16:], s.addr)
			o.PutUint64(e[24:], offs[i])
			o.PutUint64(e[32:], uint64(len(s.data)))
		} else {
			o.PutUint32(e[8:], uint32(s.flags))
			o.PutUint32(e[12:], uint32(s.addr))
			o.PutUint32(e[16:], uint32(offs[i]))
			o.PutUint32(e[20:], uint32(len(s.data)))
		}
		if i == 0 {
			for j := range e {
				e[j] = 0
			}
		}
		b = append(b, e...)
	}
	b = set(b, fPhoff, uint64(eh))
	b = set(b, fShoff, shoff)
	b = set(b, fPhentsize, uint64(ph))
	b = set(b, fPhnum, uint64(len(m.progs)))
	b = set(b, fShentsize, uint64(sh))
	b = set(b, fShnum, uint64(len(secs)))
	b = set(b, fShstrndx, uint64(len(secs)-1))
	o.PutUint16(b[eh-12:], uint16(eh)) // e_ehsize
	return b, shoff
}

// buildID is a GNU build ID note with a 4-byte descriptor.
func buildIDNote(o binary.ByteOrder, id []byte) []byte {
	n := make([]byte, 16)
	o.PutUint32(n, 4)
	o.PutUint32(n[4:], uint32(len(id)))
	o.PutUint32(n[8:], elf.NT_GNU_BUILD_ID)
	copy(n[12:], "GNU\x00")
	return append(n, id...)
}

// sample is a valid file of each class and byte order: a PT_LOAD, a
// PT_NOTE over the build ID section, and a .text section.
func sample(class elf.Class, o binary.ByteOrder) []byte {
	note := buildIDNote(o, []byte{0xde, 0xad, 0xbe, 0xef})
	m := image{class: class, order: o, secs: []sec{
		{name: ".note.gnu.build-id", typ: elf.SHT_NOTE, flags: elf.SHF_ALLOC, data: note},
		{name: ".text", typ: elf.SHT_PROGBITS, flags: elf.SHF_ALLOC | elf.SHF_EXECINSTR, addr: 0x1000, data: []byte{1, 2, 3, 4}},
		{name: ".bss", typ: elf.SHT_NOBITS, flags: elf.SHF_ALLOC, addr: 0x2000},
	}}
	m.progs = []elf.ProgHeader{{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X}, {Type: elf.PT_NOTE, Flags: elf.PF_R}}
	b, _ := m.build()
	// The note sits right after the program headers (8-aligned).
	eh, ph, _ := m.sizes()
	noteOff := uint64(eh + 2*ph)
	noteOff = (noteOff + 7) &^ 7
	m.progs[0].Filesz, m.progs[0].Memsz = uint64(len(b)), uint64(len(b))
	m.progs[1].Off, m.progs[1].Filesz, m.progs[1].Vaddr = noteOff, uint64(len(note)), noteOff
	b, _ = m.build()
	return b
}

var classes = []struct {
	name  string
	class elf.Class
	order binary.ByteOrder
}{
	{"ELF32LE", elf.ELFCLASS32, binary.LittleEndian},
	{"ELF32BE", elf.ELFCLASS32, binary.BigEndian},
	{"ELF64LE", elf.ELFCLASS64, binary.LittleEndian},
	{"ELF64BE", elf.ELFCLASS64, binary.BigEndian},
}

func parse(b []byte) (*elf.File, error) { return elf.NewFile(bytes.NewReader(b), int64(len(b))) }

func TestSample(t *testing.T) {
	for _, c := range classes {
		b := sample(c.class, c.order)
		f, err := parse(b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := f.BuildID(); !bytes.Equal(got, []byte{0xde, 0xad, 0xbe, 0xef}) {
			t.Errorf("%s: build ID %x", c.name, got)
		}
		if s := f.Section(".text"); s == nil || s.Addr != 0x1000 {
			t.Errorf("%s: .text %+v", c.name, s)
		} else if d, err := s.Data(); err != nil || !bytes.Equal(d, []byte{1, 2, 3, 4}) {
			t.Errorf("%s: .text data %x, %v", c.name, d, err)
		}
		compare(t, c.name, b)
	}
}

// Hostile headers: each is an error that says where (a *FormatError with
// the offending record's offset), never a panic or an allocation of the
// size a header claims.
func TestHostileHeaders(t *testing.T) {
	for _, c := range classes {
		b := sample(c.class, c.order)
		f, err := parse(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			b    []byte
			msg  string // in the error
		}{
			{"e_phnum past the end", set(b, fPhnum, 0xfffe), "program header table"},
			{"e_phoff past the end", set(b, fPhoff, uint64(len(b))), "program header table"},
			{"e_phoff wraps", set(b, fPhoff, 1<<32-8), "program header table"},
			{"e_phentsize short", set(b, fPhentsize, 8), "e_phentsize"},
			{"e_phentsize huge", set(b, fPhentsize, 0xffff), "program header table"},
			{"e_shnum past the end", set(b, fShnum, 0xfeff), "section header table"},
			{"e_shoff past the end", set(b, fShoff, uint64(len(b))-8), "section header table"},
			{"e_shoff wraps", set(b, fShoff, 1<<32-16), "section header table"},
			{"e_shnum without e_shoff", set(b, fShoff, 0), "without a section header table"},
			{"e_shstrndx out of range", set(b, fShstrndx, uint64(len(f.Sections))), "e_shstrndx"},
			{"e_shstrndx not a string table", set(b, fShstrndx, 1), "section name table"},
			{"e_shentsize short", set(b, fShentsize, 16), "e_shentsize"},
			{"extended count too small", set(b, fShnum, 0), "extended section count"},
		} {
			_, err := parse(tc.b)
			if tc.msg == "" {
				continue
			}
			if err == nil {
				t.Errorf("%s: %s: no error", c.name, tc.name)
				continue
			}
			fe := formatErrorAt(t, c.name+": "+tc.name, err)
			if !strings.Contains(fe.Msg, tc.msg) {
				t.Errorf("%s: %s: %v, want %q", c.name, tc.name, err, tc.msg)
			}
			if fe.Off < 0 || fe.Off > int64(len(b)) && !strings.Contains(tc.name, "wraps") && !strings.Contains(tc.name, "past the end") {
				t.Errorf("%s: %s: offset %#x outside the file", c.name, tc.name, fe.Off)
			}
			compare(t, c.name+": "+tc.name, tc.b)
		}
	}
}

// Section header fields, 32-bit then 64-bit (offsets in the header).
var (
	sName   = field{0, 0, 4, 4}
	sType   = field{4, 4, 4, 4}
	sFlags  = field{8, 8, 4, 8}
	sOffset = field{16, 24, 4, 8}
	sSize   = field{20, 32, 4, 8}
	sInfo   = field{28, 44, 4, 4}
)

// setSection overwrites a field of section header i of a sample file.
func setSection(b []byte, i int, f field, v uint64) []byte {
	b = append([]byte(nil), b...)
	o := order(b)
	n, size := 5, 40
	if b[elf.EI_CLASS] == byte(elf.ELFCLASS64) {
		size = 64
	}
	shoff := len(b) - n*size // the sample's five section headers are last
	h := b[shoff+i*size:]
	if size == 64 {
		put(o, h[f.off64:], f.size64, v)
	} else {
		put(o, h[f.off32:], f.size32, v)
	}
	return b
}

// Sections that lie: each is read as a header, and its data is an error
// without allocating what it claims.
func TestHostileSections(t *testing.T) {
	const text = 2 // .text in the sample
	for _, c := range classes {
		b := sample(c.class, c.order)
		huge := uint64(1<<32 - 16)
		if c.class == elf.ELFCLASS64 {
			huge = 1 << 40
		}
		for _, tc := range []struct {
			name string
			b    []byte
			msg  string
		}{
			{"offset past the end", setSection(b, text, sOffset, uint64(len(b))+1), "past the end of the file"},
			{"size past the end", setSection(b, text, sSize, huge), "past the end of the file"},
			{"offset+size wraps", setSection(setSection(b, text, sOffset, huge), text, sSize, huge), "past the end of the file"},
			{"compressed", setSection(b, text, sFlags, uint64(elf.SHF_COMPRESSED|elf.SHF_ALLOC)), "not supported"},
		} {
			f, err := parse(tc.b)
			if err != nil {
				t.Fatalf("%s: %s: %v", c.name, tc.name, err)
			}
			var d []byte
			n := testutil.Allocated(func() { d, err = f.Sections[text].Data() })
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s: %s: data %x, %v; want %q", c.name, tc.name, d, err, tc.msg)
			}
			if n > 1<<16 {
				t.Errorf("%s: %s: allocated %d bytes", c.name, tc.name, n)
			}
			if tc.name == "compressed" && !errors.Is(err, elf.ErrCompressed) {
				t.Errorf("%s: compressed: %v is not ErrCompressed", c.name, err)
			}
			if tc.name != "compressed" {
				formatErrorAt(t, c.name+": "+tc.name, err)
				compare(t, c.name+": "+tc.name, tc.b)
			}
		}
		for _, tc := range []struct {
			name string
			b    []byte
			msg  string
		}{
			{"name past the name table", setSection(b, text, sName, 1<<20), "outside the section name table"},
			{"name table without a NUL", setSection(b, 4, sSize, 3), "outside the section name table"},
			{"name table past the end", setSection(b, 4, sOffset, huge), "past the end of the file"},
			{"name table over the limit", setSection(b, 4, sSize, elf.MaxNameTable+1), "limit"},
			{"name table is NOBITS", setSection(b, 4, sType, uint64(elf.SHT_NOBITS)), "section name table"},
		} {
			var err error
			n := testutil.Allocated(func() { _, err = parse(tc.b) })
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s: %s: %v, want %q", c.name, tc.name, err, tc.msg)
				continue
			}
			formatErrorAt(t, c.name+": "+tc.name, err)
			if n > 1<<16 {
				t.Errorf("%s: %s: allocated %d bytes", c.name, tc.name, n)
			}
			if tc.name != "name table over the limit" {
				compare(t, c.name+": "+tc.name, tc.b)
			}
		}
	}
}

// Extended numbering (gABI): e_phnum PN_XNUM takes the count from section
// header 0's sh_info, e_shnum 0 from its sh_size, e_shstrndx SHN_XINDEX
// from its sh_link. debug/elf (Go 1.22) ignores PN_XNUM, and indexes its
// sections with an unchecked sh_link.
func TestExtendedNumbering(t *testing.T) {
	for _, c := range classes {
		b := sample(c.class, c.order)
		x := setSection(set(b, fPhnum, elf.PN_XNUM), 0, sInfo, 2)
		f, err := parse(x)
		if err != nil || len(f.Progs) != 2 || f.Progs[1].Type != elf.PT_NOTE {
			t.Errorf("%s: PN_XNUM with sh_info 2: %v, %d program headers", c.name, err, len(f.Progs))
		}
		if _, err := parse(setSection(set(b, fPhnum, elf.PN_XNUM), 0, sInfo, 1<<31)); err == nil || !strings.Contains(err.Error(), "limit") {
			t.Errorf("%s: PN_XNUM with sh_info 2^31: %v", c.name, err)
		}
		if _, err := parse(setSection(set(b, fPhnum, elf.PN_XNUM), 0, sInfo, 60000)); err == nil {
			t.Errorf("%s: PN_XNUM with a count past the file: no error", c.name)
		}
		// e_shnum 0: the count in sh_size must be at least SHN_LORESERVE,
		// and fit the file and the limit.
		for _, n := range []uint64{uint64(elf.SHN_LORESERVE), 1<<32 - 1} {
			_, err := parse(setSection(set(b, fShnum, 0), 0, sSize, n))
			formatErrorAt(t, fmt.Sprintf("%s: sh_size %d", c.name, n), err)
		}
		if _, err := parse(setSection(set(b, fShnum, 0), 0, sType, uint64(elf.SHT_PROGBITS))); err == nil {
			t.Errorf("%s: section 0 not SHT_NULL: no error", c.name)
		}
	}
}

// A file with 0xff00 sections (extended numbering for real) whose
// SHN_XINDEX name table index points past them: debug/elf panics.
func TestShstrndxPastExtendedCount(t *testing.T) {
	const n = int(elf.SHN_LORESERVE) + 2
	m := image{class: elf.ELFCLASS32, order: binary.LittleEndian}
	for i := 0; i < n-2; i++ {
		m.secs = append(m.secs, sec{typ: elf.SHT_PROGBITS})
	}
	b, shoff := m.build()
	b = set(set(b, fShnum, 0), fShstrndx, uint64(elf.SHN_XINDEX))
	o := binary.LittleEndian
	o.PutUint32(b[shoff+20:], uint32(n))   // sh_size: the count
	o.PutUint32(b[shoff+24:], uint32(n-1)) // sh_link: the name table
	f, err := parse(b)
	if err != nil || len(f.Sections) != n || f.Sections[n-1].Name != ".shstrtab" {
		t.Fatalf("extended numbering: %v", err)
	}
	compare(t, "extended", b)
	o.PutUint32(b[shoff+24:], uint32(n+5))
	_, err = parse(b)
	if fe := formatErrorAt(t, "sh_link past the count", err); !strings.Contains(fe.Msg, "out of range") {
		t.Errorf("sh_link past the count: %v", err)
	}
	if _, err := stdParse(b); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Logf("debug/elf on sh_link past the count: %v", err)
	}
}

// Every section naming the same long name: the names made are bounded,
// not sections × the longest name.
func TestNamesBounded(t *testing.T) {
	const n = 600
	m := image{class: elf.ELFCLASS64, order: binary.LittleEndian}
	m.secs = append(m.secs, sec{name: strings.Repeat("x", 4000), typ: elf.SHT_PROGBITS})
	for i := 1; i < n; i++ {
		m.secs = append(m.secs, sec{typ: elf.SHT_PROGBITS})
	}
	b, shoff := m.build()
	if f, err := parse(b); err != nil || len(f.Sections[1].Name) != 4000 {
		t.Fatalf("one long name: %v", err)
	}
	for i := 2; i <= n; i++ {
		binary.LittleEndian.PutUint32(b[shoff+uint64(i*64):], 1) // sh_name of the long one
	}
	var err error
	if a := testutil.Allocated(func() { _, err = parse(b) }); a > 2*elf.MaxNameTable {
		t.Errorf("allocated %d bytes for %d names", a, n)
	}
	if fe := formatErrorAt(t, "600 long names", err); !strings.Contains(fe.Msg, "in all") {
		t.Errorf("600 long names: %v", err)
	}
}

// Program headers wider than their fields (e_phentsize above the
// class's) are read a chunk at a time and agree with debug/elf.
func TestWideEntries(t *testing.T) {
	for _, c := range classes {
		b := sample(c.class, c.order)
		f, _ := parse(b)
		eh, ph := 52, 32
		if c.class == elf.ELFCLASS64 {
			eh, ph = 64, 56
		}
		for _, ent := range []int{ph + 8, 40000} {
			// Lay the two program headers out at the wider stride,
			// appended after the file.
			w := append([]byte(nil), b...)
			at := len(w)
			w = append(w, make([]byte, 2*ent)...)
			copy(w[at:], b[eh:eh+ph])
			copy(w[at+ent:], b[eh+ph:eh+2*ph])
			w = set(set(w, fPhoff, uint64(at)), fPhentsize, uint64(ent))
			g, err := parse(w)
			if err != nil || len(g.Progs) != 2 || g.Progs[1].ProgHeader != f.Progs[1].ProgHeader {
				t.Errorf("%s: e_phentsize %d: %v", c.name, ent, err)
				continue
			}
			compare(t, fmt.Sprintf("%s e_phentsize %d", c.name, ent), w)
		}
	}
}
