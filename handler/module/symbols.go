package module

import (
	"sort"

	"github.com/unwound-dev/unwound/handler/elf"
)

// maxSymbols bounds the function-start index: libc has about 3,000
// dynamic symbols; a hostile file must not make us hold millions.
const maxSymbols = 1 << 17

// FuncStart returns the start of the function holding vaddr (a file
// address), from .symtab or, in stripped files, .dynsym: the prologue
// analyzers need it where unwind tables leave a function out (glibc's
// abort on armhf, much of riscv64's libc). ok is false when no symbol
// precedes vaddr within its executable segment.
func (f *File) FuncStart(vaddr uint64) (uint64, bool) {
	if !f.symsLoaded {
		f.symsLoaded = true
		f.funcs = f.loadFuncStarts()
	}
	i := sort.Search(len(f.funcs), func(i int) bool { return f.funcs[i] > vaddr }) - 1
	if i < 0 {
		return 0, false
	}
	return f.funcs[i], true
}

// loadFuncStarts reads the symbol tables' entries directly (ELF gABI
// "Symbol Table"), a page at a time, without their names: holding every
// name would cost memory the handler does not need.
func (f *File) loadFuncStarts() []uint64 {
	entSize := uint64(16)
	if f.Class == elf.ELFCLASS64 {
		entSize = 24
	}
	var starts []uint64
	for _, s := range f.symtabs {
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
			if _, err := f.r.ReadAt(chunk, int64(s.Offset+i*entSize)); err != nil {
				break
			}
			for e := chunk; len(e) >= int(entSize); e = e[entSize:] {
				var value uint64
				var info byte
				var shndx uint16
				if entSize == 16 {
					value, info, shndx = uint64(f.Order.Uint32(e[4:])), e[12], f.Order.Uint16(e[14:])
				} else {
					info, shndx, value = e[4], f.Order.Uint16(e[6:]), f.Order.Uint64(e[8:])
				}
				if elf.ST_TYPE(info) == elf.STT_FUNC && value != 0 && elf.SectionIndex(shndx) != elf.SHN_UNDEF {
					starts = append(starts, value&^1) // ARM: Thumb functions have bit 0 set
				}
			}
			i += uint64(len(chunk)) / entSize
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	return starts
}
