package coredump

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/elf"
)

// CoreSegment is one PT_LOAD of a core being written; the first Filesz
// bytes of it are dumped.
type CoreSegment struct {
	Vaddr, Filesz, Memsz uint64 // Memsz 0: Filesz
	Flags                elf.ProgFlag
	Offset               uint64 // set by Header
}

// CoreLayout lays a core out the way the kernel writes it
// (fs/binfmt_elf.c elf_core_dump): ELF header, program headers with
// PT_NOTE first, the notes, padding to a page, the segments' data in
// program-header order and, with PN_XNUM, section header 0 at the end.
// It is the one core writer of the install self-test and the tests; the
// fields after Segs let a test write the odd cores a reader must survive.
type CoreLayout struct {
	NoteWriter
	Notes []byte // note records, NoteWriter.AppendNote
	Segs  []CoreSegment

	XNum      bool   // PN_XNUM even with fewer than 0xffff segments
	NotePad   int    // zero bytes between the program headers and the notes
	NullPhdrs int    // PT_NULL program headers after the PT_LOADs
	Align     uint64 // of the segment data; 0: a page, as the kernel does
}

func (l *CoreLayout) order() interface {
	binary.ByteOrder
	binary.AppendByteOrder
} {
	if l.Order == binary.ByteOrder(binary.BigEndian) {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// Header returns what precedes the segment data (ELF header, program
// headers, notes, padding) and sets each segment's Offset. phOff holds the
// offset of every program header, PT_NOTE's first, for tests that patch
// them; shdr is what follows the segment data (nil without PN_XNUM).
func (l *CoreLayout) Header() (hdr []byte, phOff []int, shdr []byte) {
	ehsize, phentsize, shentsize := 52, 32, 40
	if l.Class == elf.ELFCLASS64 {
		ehsize, phentsize, shentsize = 64, 56, 64
	}
	o := l.order()
	nph := 1 + len(l.Segs) + l.NullPhdrs
	xnum := l.XNum || nph >= pnXNum
	noteOff := uint64(ehsize + nph*phentsize + l.NotePad)
	align := l.Align
	if align == 0 {
		align = 4096
	}
	off := (noteOff + uint64(len(l.Notes)) + align - 1) &^ (align - 1)
	dataStart := off
	for i := range l.Segs {
		l.Segs[i].Offset = off
		off += l.Segs[i].Filesz
	}
	var shoff uint64
	if xnum {
		shoff = off
	}

	h := make([]byte, ehsize, dataStart)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS] = byte(l.Class)
	h[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	if o == binary.BigEndian {
		h[elf.EI_DATA] = byte(elf.ELFDATA2MSB)
	}
	h[elf.EI_VERSION] = 1
	o.PutUint16(h[16:], uint16(elf.ET_CORE))
	o.PutUint16(h[18:], uint16(l.Machine))
	o.PutUint32(h[20:], 1)
	phnum := uint16(nph)
	if xnum {
		phnum = pnXNum
	}
	shnum := uint16(0)
	if xnum {
		shnum = 1
	}
	if l.Class == elf.ELFCLASS64 {
		o.PutUint64(h[32:], uint64(ehsize))
		o.PutUint64(h[40:], shoff)
		o.PutUint16(h[52:], uint16(ehsize))
		o.PutUint16(h[54:], uint16(phentsize))
		o.PutUint16(h[56:], phnum)
		if xnum {
			o.PutUint16(h[58:], uint16(shentsize))
		}
		o.PutUint16(h[60:], shnum)
	} else {
		o.PutUint32(h[28:], uint32(ehsize))
		o.PutUint32(h[32:], uint32(shoff))
		o.PutUint16(h[40:], uint16(ehsize))
		o.PutUint16(h[42:], uint16(phentsize))
		o.PutUint16(h[44:], phnum)
		if xnum {
			o.PutUint16(h[46:], uint16(shentsize))
		}
		o.PutUint16(h[48:], shnum)
	}
	phOff = append(phOff, len(h))
	h = l.appendPhdr(h, elf.PT_NOTE, 0, noteOff, 0, uint64(len(l.Notes)), 0, 4)
	for _, s := range l.Segs {
		memsz := s.Memsz
		if memsz == 0 {
			memsz = s.Filesz
		}
		phOff = append(phOff, len(h))
		h = l.appendPhdr(h, elf.PT_LOAD, s.Flags, s.Offset, s.Vaddr, s.Filesz, memsz, 4096)
	}
	h = append(h, make([]byte, l.NullPhdrs*phentsize+l.NotePad)...)
	h = append(h, l.Notes...)
	h = append(h, make([]byte, int(dataStart)-len(h))...)
	if xnum {
		shdr = make([]byte, shentsize)
		if l.Class == elf.ELFCLASS64 {
			o.PutUint64(shdr[32:], 1) // sh_size: e_shnum
			o.PutUint32(shdr[44:], uint32(nph))
		} else {
			o.PutUint32(shdr[20:], 1)
			o.PutUint32(shdr[28:], uint32(nph))
		}
	}
	return h, phOff, shdr
}

// appendPhdr appends an Elf64_Phdr or Elf32_Phdr (their fields are in
// different orders).
func (l *CoreLayout) appendPhdr(b []byte, typ elf.ProgType, flags elf.ProgFlag, off, vaddr, filesz, memsz, align uint64) []byte {
	o := l.order()
	if l.Class == elf.ELFCLASS64 {
		b = o.AppendUint32(b, uint32(typ))
		b = o.AppendUint32(b, uint32(flags))
		for _, v := range []uint64{off, vaddr, 0 /* p_paddr */, filesz, memsz, align} {
			b = o.AppendUint64(b, v)
		}
		return b
	}
	for _, v := range []uint64{uint64(typ), off, vaddr, 0 /* p_paddr */, filesz, memsz, uint64(flags), align} {
		b = o.AppendUint32(b, uint32(v))
	}
	return b
}
