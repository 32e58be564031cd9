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
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Load(bytes.NewReader(b))
		if err != nil {
			return
		}
		file.HasUnwindInfo()
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
