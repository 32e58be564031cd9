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
	// A .debug_aranges set (version 2, unit 0, 8-byte addresses, one
	// range) and a DWARF 5 unit header.
	f.Add([]byte("\x2c\x00\x00\x00\x02\x00\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("\x0c\x00\x00\x00\x05\x00\x01\x08\x00\x00\x00\x00\x01\x11\x01\x00\x00\x00"))
	// Real files when a compiler is at hand: a small -O2 program with
	// inlined calls, and its stripped copy.
	if _, err := exec.LookPath("gcc"); err == nil {
		exe := filepath.Join(f.TempDir(), "inline")
		src, _ := filepath.Abs(filepath.Join("testdata", "inline.c"))
		// Compressed sections too: the lazy inflating path.
		if exec.Command("gcc", "-O2", "-g", "-gz", "-o", exe+"-gz", src).Run() == nil {
			if b, err := os.ReadFile(exe + "-gz"); err == nil {
				f.Add(b)
			}
		}
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
		parseAranges(data, binary.LittleEndian)
		parseUnitHeader(data, 0, binary.BigEndian)
		scanAbbrevTable(data, 0)
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
		if mod.dwarf != nil {
			mod.dwarf.prepare([]uint64{0x1000, 0x1139})
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

// FuzzDWARFTables feeds arbitrary bytes to the small parsers of outside
// input the lazy DWARF index adds (.debug_aranges, unit headers,
// abbreviation tables, compressed section headers), each on its own so
// that the fuzzer reaches them quickly.
func FuzzDWARFTables(f *testing.F) {
	f.Add([]byte("\x2c\x00\x00\x00\x02\x00\x00\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), uint64(0))
	f.Add([]byte("\x0c\x00\x00\x00\x05\x00\x01\x08\x00\x00\x00\x00\x01\x11\x01\x00\x00\x00"), uint64(0))
	f.Add([]byte("\xff\xff\xff\xff\x20\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x08"), uint64(0))
	f.Add([]byte("\x01\x11\x01\x25\x0e\x13\x0b\x00\x00\x02\x2e\x00\x03\x08\x21\x05\x00\x00\x00"), uint64(0))
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x78\x9c\x63\x60\x00\x00\x00\x02\x00\x01"), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, off uint64) {
		for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			if ar, err := parseAranges(data, order); err == nil {
				for _, a := range ar {
					if a.hi <= a.lo {
						t.Fatalf("empty range %+v", a)
					}
				}
			}
			if h, err := parseUnitHeader(data, off, order); err == nil {
				if h.end <= h.off || h.die > h.end || h.abbrevPos < h.off {
					t.Fatalf("header %+v", h)
				}
			}
			inflateSection(data, elf.ELFCLASS64, order)
			inflateSection(data, elf.ELFCLASS32, order)
		}
		if end, ok := scanAbbrevTable(data, off); ok && (end <= off || end > uint64(len(data))) {
			t.Fatalf("table at %d ends at %d of %d", off, end, len(data))
		}
	})
}
