package module

import (
	"bytes"
	"os"
	"testing"
)

func FuzzLoad(f *testing.F) {
	if b, err := os.ReadFile("testdata/tiny.elf"); err == nil {
		f.Add(b)
	}
	if b, err := os.ReadFile("testdata/mdi/mdi-arm.frame"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Load(bytes.NewReader(b))
		if err != nil {
			return
		}
		file.HasUnwindInfo()
		file.FuncStart(0x10100)
		file.CFITables(0x10100)
		file.CodeID()
		p := make([]byte, 16)
		for _, s := range file.loads {
			file.ReadCode(s.Vaddr, p)
		}
		m := &Module{Path: "fuzz", Maps: []Mapping{{Start: 0x1000, End: 0x2000, Path: "fuzz"}}}
		m.LoadFrom(bytes.NewReader(b))
		if file.EHFrame != nil {
			for _, s := range file.loads {
				file.EHFrame.Lookup(s.Vaddr)
			}
		}
		if file.DebugFrame != nil {
			for _, s := range file.loads {
				file.DebugFrame.Lookup(s.Vaddr)
			}
		}
	})
}

// FuzzMiniDebugInfo feeds .gnu_debugdata contents (an xz stream holding
// an ELF file) to the reader: it must fail cleanly, within its bounds.
func FuzzMiniDebugInfo(f *testing.F) {
	outer, err := Load(bytes.NewReader(readFixture(f, "mdi-arm.frame")))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{"mdi-arm.frame", "mdi-arm.yocto", "mdi-riscv64.frame"} {
		d, _ := debugdata(f, readFixture(f, name))
		f.Add(d)
		f.Add(d[:len(d)/2])
	}
	f.Add(xzOf(f, readFixture(f, "mdi-arm")))
	f.Fuzz(func(t *testing.T, b []byte) {
		inner, err := decompressXZ(b, 1<<20)
		if err != nil {
			return
		}
		m, err := parseMiniELF(inner, outer)
		if err != nil {
			return
		}
		if m.debugFrame != nil {
			for _, pc := range append(m.funcs, 0, 0x10000) {
				if fde, err := m.debugFrame.Lookup(pc); err == nil {
					m.debugFrame.Row(fde, pc)
				}
			}
		}
	})
}
