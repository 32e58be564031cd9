package elf_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/elf"
)

// FuzzNewFile: any input is a file or an error, never a panic; every
// section and segment can be read or is an error; where debug/elf reads
// the file too, both agree (compare).
func FuzzNewFile(f *testing.F) {
	for _, c := range classes {
		b := sample(c.class, c.order)
		f.Add(b)
		f.Add(set(b, fPhnum, elf.PN_XNUM))
		f.Add(setSection(set(b, fShnum, 0), 0, sSize, uint64(elf.SHN_LORESERVE)))
		f.Add(setSection(b, 2, sFlags, uint64(elf.SHF_COMPRESSED)))
	}
	for _, n := range []string{"tiny.elf", "tiny-arm.elf"} {
		if b, err := os.ReadFile(filepath.Join("..", "module", "testdata", n)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ef, err := parse(b)
		if err != nil {
			return
		}
		for _, p := range ef.Progs {
			p.Data()
			_ = p.Type.String()
		}
		for _, s := range ef.Sections {
			s.Data()
			_ = s.Type.String()
			if ef.Section(s.Name) == nil {
				t.Errorf("Section(%q) not found", s.Name)
			}
		}
		ef.BuildID()
		_ = ef.Machine.String() + ef.Type.String() + ef.Class.String() + ef.Data.String()
		compare(t, "fuzz", b)
	})
}
