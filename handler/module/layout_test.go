package module

import (
	"debug/elf"
	"fmt"
	"testing"
)

// linkerLayouts are the ways the programs users ship are linked: GNU ld
// with and without -z separate-code, gold, lld (its default
// -z noseparate-code shares a file page between the r-- and r-x
// segments) and mold (the same), through gcc and clang.
var linkerLayouts = []struct {
	name string
	cc   string
	args []string
}{
	{"bfd-separate", "gcc", []string{"-fuse-ld=bfd", "-Wl,-z,separate-code"}},
	{"bfd-noseparate", "gcc", []string{"-fuse-ld=bfd", "-Wl,-z,noseparate-code"}},
	{"gold", "gcc", []string{"-fuse-ld=gold"}},
	{"lld", "gcc", []string{"-fuse-ld=lld"}},
	{"mold", "gcc", []string{"-fuse-ld=mold"}},
	{"clang-lld", "clang", []string{"-fuse-ld=lld"}},
	{"clang-lld-separate", "clang", []string{"-fuse-ld=lld", "-Wl,-z,separate-code"}},
}

// linkKinds are what each linker is asked to produce.
var linkKinds = []struct {
	name string
	args []string
	lib  bool
}{
	{"pie", []string{"-O2", "-pie", "-fPIE"}, false},
	{"exec", []string{"-O2", "-no-pie", "-fno-PIE"}, false},
	{"static", []string{"-O2", "-static"}, false},
	{"shared", []string{"-O2", "-shared", "-fPIC"}, true},
}

const layoutC = `#include <stdio.h>
__attribute__((noinline)) int f1(int x) { return x * 3 + 1; }
__attribute__((noinline)) int f2(int x) { return f1(x) + 2; }
int main(void) { printf("%d\n", f2(1)); return 0; }
`

// ldsoMaps maps path's PT_LOAD segments the way ld.so and the kernel map
// them: each at the page of p_vaddr + base, from the page of p_offset,
// with the segment's permissions (perms false: as NT_FILE lists them,
// without).
func ldsoMaps(t *testing.T, path string, base uint64, perms bool) []Mapping {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	const page = 0xfff
	var maps []Mapping
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		mp := Mapping{
			Start:  (p.Vaddr + base) &^ page,
			End:    (p.Vaddr + base + p.Filesz + page) &^ page,
			Offset: p.Off &^ page,
			Path:   path,
		}
		if perms {
			mp.Perms = permString(p.Flags)
		}
		maps = append(maps, mp)
	}
	return maps
}

func permString(f elf.ProgFlag) string {
	b := []byte("---p")
	if f&elf.PF_R != 0 {
		b[0] = 'r'
	}
	if f&elf.PF_W != 0 {
		b[1] = 'w'
	}
	if f&elf.PF_X != 0 {
		b[2] = 'x'
	}
	return string(b)
}

// TestPlaceLinkerLayouts loads binaries linked each way, mapped as ld.so
// maps them, and checks that every function symbol's runtime address
// translates back to its link address and to the FDE that covers it: a
// bias a page off sends every lookup to another function.
func TestPlaceLinkerLayouts(t *testing.T) {
	for _, l := range linkerLayouts {
		for _, k := range linkKinds {
			t.Run(l.name+"/"+k.name, func(t *testing.T) {
				path := buildC(t, "layout", layoutC, l.cc, append(append([]string{}, l.args...), k.args...)...)
				ef, err := elf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer ef.Close()
				base := uint64(0x7f0000000000)
				if ef.Type == elf.ET_EXEC {
					base = 0
				}
				syms, err := ef.Symbols()
				if err != nil {
					t.Fatal(err)
				}
				for _, perms := range []bool{true, false} {
					t.Run(fmt.Sprintf("perms=%v", perms), func(t *testing.T) {
						m := loadOne(t, ldsoMaps(t, path, base, perms))
						if m.Bias() != base {
							t.Fatalf("bias %#x, want %#x (runtime offset %#x, compiled offset %#x, maps %+v)",
								m.Bias(), base, m.RuntimeOffset, m.CompiledOffset, m.Maps)
						}
						checkLookups(t, m, syms, base)
					})
				}
			})
		}
	}
}

// checkLookups checks that the FDE found for each function symbol's
// runtime address, through the module's bias, is the function's own.
func checkLookups(t *testing.T, m *Module, syms []elf.Symbol, base uint64) {
	t.Helper()
	tried := 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value == 0 {
			continue
		}
		pc := s.Value + base + s.Size/2
		if Find([]*Module{m}, pc) != 0 {
			t.Errorf("%s at %#x: outside the module", s.Name, pc)
			continue
		}
		fde, err := m.File.EHFrame.Lookup(pc - m.Bias())
		if err != nil || fde == nil {
			continue // hand-written code without CFI (crt, libc's asm)
		}
		tried++
		if fde.Start > s.Value || s.Value >= fde.End {
			t.Errorf("%s [%#x,+%#x): FDE [%#x,%#x)", s.Name, s.Value, s.Size, fde.Start, fde.End)
		}
	}
	if tried == 0 {
		t.Errorf("no function looked up")
	}
}
