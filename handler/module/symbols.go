package module

import (
	"debug/elf"
	"sort"
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

func (f *File) loadFuncStarts() []uint64 {
	ef, err := elf.NewFile(f.r)
	if err != nil {
		return nil
	}
	var starts []uint64
	for _, get := range []func() ([]elf.Symbol, error){ef.Symbols, ef.DynamicSymbols} {
		syms, err := get()
		if err != nil {
			continue
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Section != elf.SHN_UNDEF {
				starts = append(starts, s.Value&^1) // ARM: Thumb functions have bit 0 set
			}
			if len(starts) >= maxSymbols {
				break
			}
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	return starts
}
