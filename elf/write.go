package elf

import "encoding/binary"

// Writer appends ELF headers in one class and byte order: the layouts of
// the gABI "ELF Header", "Program Header" and "Section Header" tables,
// whose 32- and 64-bit forms order their fields differently. It writes
// the cores of the install self-test and of the tests, and the self-test's
// program.
type Writer struct {
	Class Class
	Order binary.ByteOrder // binary.LittleEndian or binary.BigEndian
}

// Header is what a file header says beyond its identity and sizes. The
// program headers follow it directly (e_phoff is its size); e_shentsize is
// set only when there are section headers to describe (Shoff != 0), as
// the kernel leaves it in a core without PN_XNUM.
type Header struct {
	Type     Type
	Machine  Machine
	Flags    uint32 // e_flags
	Entry    uint64
	Phnum    uint16
	Shoff    uint64
	Shnum    uint16
	Shstrndx uint16
}

func (w Writer) order() binary.AppendByteOrder {
	if w.Order == binary.ByteOrder(binary.BigEndian) {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// Sizes returns the sizes of the file header and of one program and one
// section header.
func (w Writer) Sizes() (ehsize, phentsize, shentsize int) { return w.Class.sizes() }

// AppendHeader appends the file header.
func (w Writer) AppendHeader(b []byte, h Header) []byte {
	o := w.order()
	ehsize, phentsize, shentsize := w.Sizes()
	if h.Shoff == 0 {
		shentsize = 0
	}
	data := ELFDATA2LSB
	if w.Order == binary.ByteOrder(binary.BigEndian) {
		data = ELFDATA2MSB
	}
	b = append(b, ELFMAG...)
	b = append(b, byte(w.Class), byte(data), 1 /* EI_VERSION */)
	b = append(b, make([]byte, 16-len(ELFMAG)-3)...)
	b = o.AppendUint16(b, uint16(h.Type))
	b = o.AppendUint16(b, uint16(h.Machine))
	b = o.AppendUint32(b, 1) // e_version
	b = w.appendAddr(b, h.Entry)
	b = w.appendAddr(b, uint64(ehsize)) // e_phoff
	b = w.appendAddr(b, h.Shoff)
	b = o.AppendUint32(b, h.Flags)
	for _, v := range []int{ehsize, phentsize, int(h.Phnum), shentsize, int(h.Shnum), int(h.Shstrndx)} {
		b = o.AppendUint16(b, uint16(v))
	}
	return b
}

// AppendProg appends a program header.
func (w Writer) AppendProg(b []byte, p ProgHeader) []byte {
	o := w.order()
	if w.Class == ELFCLASS64 {
		b = o.AppendUint32(b, uint32(p.Type))
		b = o.AppendUint32(b, uint32(p.Flags))
		for _, v := range []uint64{p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz, p.Align} {
			b = o.AppendUint64(b, v)
		}
		return b
	}
	for _, v := range []uint64{uint64(p.Type), p.Off, p.Vaddr, p.Paddr, p.Filesz, p.Memsz, uint64(p.Flags), p.Align} {
		b = o.AppendUint32(b, uint32(v))
	}
	return b
}

// AppendSection appends a section header whose name is at name in the
// section name string table (s.Name and s.FileSize are not written).
func (w Writer) AppendSection(b []byte, name uint32, s SectionHeader) []byte {
	o := w.order()
	b = o.AppendUint32(b, name)
	b = o.AppendUint32(b, uint32(s.Type))
	b = w.appendAddr(b, uint64(s.Flags))
	b = w.appendAddr(b, s.Addr)
	b = w.appendAddr(b, s.Offset)
	b = w.appendAddr(b, s.Size)
	b = o.AppendUint32(b, s.Link)
	b = o.AppendUint32(b, s.Info)
	b = w.appendAddr(b, s.Addralign)
	return w.appendAddr(b, s.Entsize)
}

// appendAddr appends an address-sized word (Elf32_Addr/Off or
// Elf64_Addr/Off, and the class-sized flags and sizes).
func (w Writer) appendAddr(b []byte, v uint64) []byte {
	if w.Class == ELFCLASS64 {
		return w.order().AppendUint64(b, v)
	}
	return w.order().AppendUint32(b, uint32(v))
}
