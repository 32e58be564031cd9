package coredump

import "github.com/unwound-dev/unwound/elf"

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

func (l *CoreLayout) writer() elf.Writer { return elf.Writer{Class: l.Class, Order: l.Order} }

// Header returns what precedes the segment data (ELF header, program
// headers, notes, padding) and sets each segment's Offset. phOff holds the
// offset of every program header, PT_NOTE's first, for tests that patch
// them; shdr is what follows the segment data (nil without PN_XNUM).
func (l *CoreLayout) Header() (hdr []byte, phOff []int, shdr []byte) {
	w := l.writer()
	ehsize, phentsize, _ := w.Sizes()
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
	eh := elf.Header{Type: elf.ET_CORE, Machine: l.Machine, Phnum: uint16(nph)}
	if xnum {
		eh.Phnum, eh.Shoff, eh.Shnum = pnXNum, off, 1
	}
	h := w.AppendHeader(make([]byte, 0, dataStart), eh)
	phOff = append(phOff, len(h))
	h = w.AppendProg(h, elf.ProgHeader{Type: elf.PT_NOTE, Off: noteOff, Filesz: uint64(len(l.Notes)), Align: 4})
	for _, s := range l.Segs {
		memsz := s.Memsz
		if memsz == 0 {
			memsz = s.Filesz
		}
		phOff = append(phOff, len(h))
		h = w.AppendProg(h, elf.ProgHeader{Type: elf.PT_LOAD, Flags: s.Flags, Off: s.Offset, Vaddr: s.Vaddr, Filesz: s.Filesz, Memsz: memsz, Align: 4096})
	}
	h = append(h, make([]byte, l.NullPhdrs*phentsize+l.NotePad)...)
	h = append(h, l.Notes...)
	h = append(h, make([]byte, int(dataStart)-len(h))...)
	if xnum {
		// Section header 0 holds the real count in sh_info (gABI
		// "Extended Program Header Numbering"); sh_size is e_shnum.
		shdr = w.AppendSection(nil, 0, elf.SectionHeader{Size: 1, Info: uint32(nph)})
	}
	return h, phOff, shdr
}
