package elf

import (
	"bytes"
	"encoding/binary"
)

// Note is one entry of a note section or segment (gABI "Note Section").
type Note struct {
	Name string // the owner, without its NUL padding
	Type uint32
	Desc []byte // aliases the bytes parsed
}

// ParseNote parses the note at b[off:] and returns it with the offset of
// the next one. Name and descriptor are padded to 4 bytes, as Linux writes
// notes in both classes (fs/binfmt_elf.c writenote) and as the GNU build ID
// note is laid out. A note that runs past the end of b is a *FormatError
// (off relative to b) with the note's type in n.Type.
func ParseNote(b []byte, off int, order binary.ByteOrder) (n Note, next int, err error) {
	if off < 0 || off > len(b) || len(b)-off < 12 {
		return n, off, errAt(uint64(off), "note header runs past the end of the notes")
	}
	nsz, dsz := uint64(order.Uint32(b[off:])), uint64(order.Uint32(b[off+4:]))
	n.Type = order.Uint32(b[off+8:])
	p := uint64(off + 12)
	na, da := (nsz+3)&^3, (dsz+3)&^3
	if na > uint64(len(b))-p || da > uint64(len(b))-p-na {
		return n, off, errAt(uint64(off), "note (type %#x) runs past the end of the notes", n.Type)
	}
	n.Name = string(bytes.TrimRight(b[p:p+nsz], "\x00"))
	n.Desc = b[p+na : p+na+dsz]
	return n, int(p + na + da), nil
}

// maxNotes bounds the note bytes BuildID reads per segment or section: a
// build ID note is 36 bytes, and a hostile header must not make the handler
// read megabytes.
const maxNotes = 1 << 16

// BuildID returns the descriptor of the first NT_GNU_BUILD_ID note, looked
// for in the PT_NOTE segments, then (when program headers say nothing) in
// the SHT_NOTE sections; nil when there is none. A segment or section that
// is over 64 KiB, cannot be read or holds a malformed note before the build
// ID is passed over.
func (f *File) BuildID() []byte {
	for _, p := range f.Progs {
		if p.Type == PT_NOTE {
			if id := f.buildID(p.Off, p.Filesz); id != nil {
				return id
			}
		}
	}
	for _, s := range f.Sections {
		if s.Type == SHT_NOTE {
			if id := f.buildID(s.Offset, s.FileSize); id != nil {
				return id
			}
		}
	}
	return nil
}

func (f *File) buildID(off, size uint64) []byte {
	if size > maxNotes {
		return nil
	}
	b, err := f.data(off, size, "notes")
	if err != nil {
		return nil
	}
	return NoteBuildID(b, f.ByteOrder)
}

// NoteBuildID returns a copy of the descriptor of the first NT_GNU_BUILD_ID
// note among the notes in b; nil when there is none or a malformed note
// comes first.
func NoteBuildID(b []byte, order binary.ByteOrder) []byte {
	for next := 0; len(b)-next >= 12; {
		n, nx, err := ParseNote(b, next, order)
		if err != nil {
			return nil
		}
		if n.Type == NT_GNU_BUILD_ID && n.Name == "GNU" && len(n.Desc) > 0 {
			return append([]byte(nil), n.Desc...)
		}
		next = nx
	}
	return nil
}
