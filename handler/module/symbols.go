package module

import (
	"encoding/binary"
	"io"
	"sort"

	"github.com/unwound-dev/unwound/elf"
)

// maxSymbols bounds the function-start index: libc has about 3,000
// dynamic symbols; a hostile file must not make us hold millions.
const maxSymbols = 1 << 17

// FuncStart returns the start of the function holding vaddr (a file
// address), from .symtab or, in stripped files, .dynsym and the .symtab of
// the file's MiniDebugInfo: the prologue analyzers, the EHABI check and
// call-site validation need it where unwind tables leave a function out
// (glibc's abort on armhf, much of riscv64's libc). ok is false when no
// symbol precedes vaddr.
func (f *File) FuncStart(vaddr uint64) (uint64, bool) {
	if !f.symsLoaded {
		f.symsLoaded = true
		f.funcs = funcStarts(f.r, f.symtabs, f.Class, f.Order)
		if !f.hasSymtab {
			if m := f.miniDebugInfo(); m != nil {
				f.funcs = append(f.funcs, m.funcs...)
			}
		}
		sort.Slice(f.funcs, func(i, j int) bool { return f.funcs[i] < f.funcs[j] })
		f.funcs = dedup(f.funcs)
	}
	i := sort.Search(len(f.funcs), func(i int) bool { return f.funcs[i] > vaddr }) - 1
	if i < 0 {
		return 0, false
	}
	return f.funcs[i], true
}

// dedup drops repeats from a sorted slice.
func dedup(s []uint64) []uint64 {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// funcStarts reads the FUNC symbols' values from symbol tables directly
// (ELF gABI "Symbol Table"), a page at a time, without their names:
// holding every name would cost memory the handler does not need.
func funcStarts(r io.ReaderAt, symtabs []elf.SectionHeader, class elf.Class, order binary.ByteOrder) []uint64 {
	entSize := uint64(16)
	if class == elf.ELFCLASS64 {
		entSize = 24
	}
	var starts []uint64
	for _, s := range symtabs {
		if s.Flags&elf.SHF_COMPRESSED != 0 {
			continue
		}
		n := s.Size / entSize
		if n > maxSymbols {
			n = maxSymbols
		}
		buf := make([]byte, 4096/entSize*entSize)
		for i := uint64(0); i < n && len(starts) < maxSymbols; {
			chunk := buf
			if left := (n - i) * entSize; left < uint64(len(chunk)) {
				chunk = chunk[:left]
			}
			if _, err := r.ReadAt(chunk, int64(s.Offset+i*entSize)); err != nil {
				break
			}
			for e := chunk; len(e) >= int(entSize); e = e[entSize:] {
				var value uint64
				var info byte
				var shndx uint16
				if entSize == 16 {
					value, info, shndx = uint64(order.Uint32(e[4:])), e[12], order.Uint16(e[14:])
				} else {
					info, shndx, value = e[4], order.Uint16(e[6:]), order.Uint64(e[8:])
				}
				if elf.ST_TYPE(info) == elf.STT_FUNC && value != 0 && elf.SectionIndex(shndx) != elf.SHN_UNDEF {
					starts = append(starts, value&^1) // ARM: Thumb functions have bit 0 set
				}
			}
			i += uint64(len(chunk)) / entSize
		}
	}
	return starts
}
