package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// FuzzSymbolizeELF feeds arbitrary bytes to everything that parses outside
// files: the ELF reader (build ID notes, .gnu_debuglink, .gnu_debugdata),
// the symbol tables, the DWARF index and lookups. Nothing may panic or
// allocate without bound.
func FuzzSymbolizeELF(f *testing.F) {
	f.Add([]byte("\x7fELF"))
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("crash.debug\x00\x01\x02\x03\x04"))
	f.Add([]byte("\xfd7zXZ\x00\x00"))
	// Real files when a compiler is at hand: a small -O2 program with
	// inlined calls, and its stripped copy.
	if _, err := exec.LookPath("gcc"); err == nil {
		exe := filepath.Join(f.TempDir(), "inline")
		src, _ := filepath.Abs(filepath.Join("testdata", "inline.c"))
		if exec.Command("gcc", "-O2", "-g", "-o", exe, src).Run() == nil {
			if b, err := os.ReadFile(exe); err == nil {
				f.Add(b)
			}
			if exec.Command("strip", "-o", exe+".s", exe).Run() == nil {
				if b, err := os.ReadFile(exe + ".s"); err == nil {
					f.Add(b)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		parseDebuglink(data, binary.LittleEndian)
		noteBuildID(bytes.NewReader(data), uint64(len(data)), binary.BigEndian)
		miniDebugInfo(data)
		inflateSection(data, elf.ELFCLASS64, binary.LittleEndian)
		inflateSection(data, elf.ELFCLASS32, binary.BigEndian)
		e, err := parseELF(bytes.NewReader(data))
		if err != nil {
			return
		}
		mod := &module{files: []*elfFile{e}}
		mod.syms = collectSymbols(e)
		if e.hasDWARF {
			if ix, _ := openIndex(e, ""); ix != nil {
				mod.dwarf = ix
			}
		}
		for _, a := range []uint64{0, 1, 0x1000, 0x1139, 0x401000, ^uint64(0)} {
			mod.lookup(a)
		}
		for _, s := range mod.syms.syms {
			mod.lookup(s.addr)
			mod.lookup(s.addr + s.size/2)
		}
	})
}
