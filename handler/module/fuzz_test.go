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

// FuzzPlace places a real file under mappings made of the fuzzer's bytes
// (as a hostile NT_FILE lists them): no panic, and a placement whose
// runtime offset is one of the mappings'.
func FuzzPlace(f *testing.F) {
	b, err := os.ReadFile("testdata/tiny.elf")
	if err != nil {
		f.Skip(err)
	}
	file, err := Load(bytes.NewReader(b))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{0x10, 0, 0, 0x10, 0x10, 1, 0x20, 0x10, 0x10, 2})
	f.Add(bytes.Repeat([]byte{0x10, 0, 0, 0x10, 0x10, 1}, 200))
	f.Fuzz(func(t *testing.T, p []byte) {
		var maps []Mapping
		for len(p) >= 5 && len(maps) < 4096 {
			start := uint64(p[0])<<12 | uint64(p[1])<<20
			mp := Mapping{Start: start, End: start + uint64(p[2]|1)<<12, Offset: uint64(p[3]) << 8, Path: "fuzz"}
			if p[4]&1 != 0 {
				mp.Perms = "r-xp"
			}
			maps = append(maps, mp)
			p = p[5:]
		}
		mods := Group(maps)
		if len(mods) != 1 {
			return
		}
		m := mods[0]
		if err := m.placeFile(file); err != nil {
			return
		}
		for _, mp := range m.Maps {
			if m.RuntimeOffset == mp.Start-mp.Offset {
				return
			}
		}
		t.Errorf("runtime offset %#x is no mapping's", m.RuntimeOffset)
	})
}
