package cfi

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// TestCIEAugmentations parses CIEs with each augmentation and pointer
// encoding and checks the FDE's range and the CIE fields.
func TestCIEAugmentations(t *testing.T) {
	initial := cat(0x0c, uleb(rRSP), uleb(8), 0x80|rRA, uleb(1))
	tests := []struct {
		name    string
		arch    Arch
		cie     cieSpec
		enc     byte // FDE pointer encoding the FDE is assembled with
		fdeAug  []byte
		start   uint64
		signal  bool
		lsda    byte
		aligned bool
		err     string
	}{
		{name: "no augmentation", cie: cieSpec{}, enc: dwEHPEabsptr},
		{name: "no augmentation 32-bit", arch: Arch{PtrSize: 4, Order: binary.LittleEndian}, cie: cieSpec{}, enc: dwEHPEabsptr},
		{name: "z alone", cie: cieSpec{aug: "z"}, enc: dwEHPEabsptr},
		{name: "zR pcrel sdata4", cie: cieSpec{aug: "zR", augData: []byte{0x1b}}, enc: 0x1b},
		{name: "zR pcrel sdata4 below the section", cie: cieSpec{aug: "zR", augData: []byte{0x1b}}, enc: 0x1b, start: 0x10},
		{name: "zR pcrel sdata8", cie: cieSpec{aug: "zR", augData: []byte{0x1c}}, enc: 0x1c},
		{name: "zR pcrel udata4", cie: cieSpec{aug: "zR", augData: []byte{0x13}}, enc: 0x13, start: 0x4000},
		{name: "zR datarel sdata4", cie: cieSpec{aug: "zR", augData: []byte{0x3b}}, enc: 0x3b},
		{name: "zR udata2", cie: cieSpec{aug: "zR", augData: []byte{0x02}}, enc: 0x02},
		{name: "zR udata4", cie: cieSpec{aug: "zR", augData: []byte{0x03}}, enc: 0x03},
		{name: "zR udata8", cie: cieSpec{aug: "zR", augData: []byte{0x04}}, enc: 0x04},
		{name: "zR sdata2", cie: cieSpec{aug: "zR", augData: []byte{0x0a}}, enc: 0x0a},
		{name: "zR sdata4", cie: cieSpec{aug: "zR", augData: []byte{0x0b}}, enc: 0x0b},
		{name: "zR sdata8", cie: cieSpec{aug: "zR", augData: []byte{0x0c}}, enc: 0x0c},
		{name: "zR uleb128", cie: cieSpec{aug: "zR", augData: []byte{0x01}}, enc: 0x01},
		{name: "zR absptr 32-bit", arch: Arch{PtrSize: 4, Order: binary.LittleEndian}, cie: cieSpec{aug: "zR", augData: []byte{0x00}}, enc: 0x00},
		{name: "zR big-endian", arch: Arch{PtrSize: 8, Order: binary.BigEndian}, cie: cieSpec{aug: "zR", augData: []byte{0x1b}}, enc: 0x1b},
		{name: "zR indirect is refused", cie: cieSpec{aug: "zR", augData: []byte{0x9b}}, enc: 0x1b, err: "indirect"},
		{name: "zR textrel is refused", cie: cieSpec{aug: "zR", augData: []byte{0x23}}, enc: 0x03, err: "relative"},
		{name: "zPR personality pcrel indirect",
			cie: cieSpec{aug: "zPR", augData: cat(0x9b, []byte{1, 2, 3, 4}, 0x1b)}, enc: 0x1b},
		{name: "zPR personality aligned absptr",
			cie: cieSpec{aug: "zPR", augData: cat(0x50, make([]byte, 7+8), 0x1b)}, enc: 0x1b, aligned: true},
		{name: "zPLR",
			cie: cieSpec{aug: "zPLR", augData: cat(0x9b, []byte{1, 2, 3, 4}, 0x1b, 0x1b)}, enc: 0x1b,
			fdeAug: []byte{0, 0, 0, 0}, lsda: 0x1b},
		{name: "zRS signal frame", cie: cieSpec{aug: "zRS", augData: []byte{0x1b}}, enc: 0x1b, signal: true},
		{name: "zRB AArch64 B key", arch: archARM64, cie: cieSpec{aug: "zRB", augData: []byte{0x1b}}, enc: 0x1b},
		{name: "unknown letter after z is skipped",
			cie: cieSpec{aug: "zRX", augData: []byte{0x1b, 0xaa, 0xbb}}, enc: 0x1b, fdeAug: []byte{1, 2, 3}},
		{name: "unknown letter without z", cie: cieSpec{aug: "X"}, err: "unknown augmentation"},
		{name: "S without z", cie: cieSpec{aug: "S"}, enc: dwEHPEabsptr, signal: true},
		{name: "eh (old GCC)", cie: cieSpec{aug: "eh", extra: make([]byte, 8)}, enc: dwEHPEabsptr},
		{name: "augmentation data too long", cie: cieSpec{aug: "zR", augData: make([]byte, 300)}, enc: 0x1b, err: "augmentation data"},
		{name: "version 3", cie: cieSpec{version: 3, aug: "zR", augData: []byte{0x1b}, ra: 300}, enc: 0x1b},
		{name: "version 4", cie: cieSpec{version: 4, aug: "zR", augData: []byte{0x1b}}, enc: 0x1b},
		{name: "version 2 is refused", cie: cieSpec{version: 2}, err: "version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.arch
			if a.PtrSize == 0 {
				a = archX86
			}
			start := tc.start
			if start == 0 {
				start = 0x3000
			}
			c := tc.cie
			c.codeAlign, c.dataAlign, c.initial = 1, -8, initial
			if c.ra == 0 {
				c.ra = rRA
			}
			const addr = 0x2000
			s := newSection(false, a.PtrSize, a.Order, addr)
			if tc.aligned {
				// The personality must start on a pointer boundary: pad
				// the augmentation data so that it does, given the CIE
				// layout (4 len, 4 id, 1 ver, "zPR\0", 1, 1, 1, 1 len,
				// 1 enc = 17 bytes), then 7 bytes of padding.
				c.augData = cat(0x50, make([]byte, 6), make([]byte, 8), 0x1b)
			}
			co := s.cie(c)
			hasZ := strings.HasPrefix(c.aug, "z")
			s.fde(co, tc.enc, hasZ, fdeSpec{start: start, length: 0x40, augData: tc.fdeAug, insns: cat(0x41, 0x0e, uleb(16))})
			s.terminator()
			tab, err := NewEHFrame(s.b, addr, nil, 0, a)
			if err != nil {
				t.Fatal(err)
			}
			fdes, err := tab.All()
			if endsInError(t, "All", err, tc.err) {
				return
			}
			if len(fdes) != 1 {
				t.Fatalf("%d FDEs", len(fdes))
			}
			f := fdes[0]
			if f.Start != start || f.End != start+0x40 {
				t.Errorf("FDE range [%#x, %#x), want [%#x, %#x)", f.Start, f.End, start, start+0x40)
			}
			if f.CIE.Signal != tc.signal {
				t.Errorf("Signal = %v", f.CIE.Signal)
			}
			if tc.lsda != 0 && f.CIE.LSDAEnc != tc.lsda {
				t.Errorf("LSDAEnc = %#x", f.CIE.LSDAEnc)
			}
			if f.CIE.RA != c.ra {
				t.Errorf("RA = %d, want %d", f.CIE.RA, c.ra)
			}
			if c.ra < 128 {
				row, err := tab.Row(f, start+1)
				if err != nil {
					t.Fatalf("Row: %v", err)
				}
				if row.CFA.Kind != RuleCFARegOffset || row.CFA.Reg != rRSP || row.CFA.Offset != 16 || row.SignalFrame != tc.signal {
					t.Errorf("row: CFA %+v signal %v", row.CFA, row.SignalFrame)
				}
			}
			if g, err := tab.Lookup(start + 0x3f); err != nil || g.Off != f.Off {
				t.Errorf("Lookup: %v, %v", g, err)
			}
		})
	}
}

// TestCIEId checks how each section tells CIEs from FDEs: .eh_frame by a
// zero id and a backward CIE pointer, .debug_frame by 0xffffffff (or its
// 64-bit form) and a section offset (which may be 0).
func TestCIEId(t *testing.T) {
	c := x86CIE()
	c.aug, c.augData = "", nil
	insns := cat(0x41, 0x0e, uleb(16))
	tests := []struct {
		name  string
		debug bool
		is64  bool
	}{
		{name: ".eh_frame 32-bit"},
		{name: ".eh_frame 64-bit length", is64: true},
		{name: ".debug_frame 32-bit", debug: true},
		{name: ".debug_frame 64-bit", debug: true, is64: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSection(tc.debug, 8, binary.LittleEndian, 0x2000)
			c := c
			c.is64 = tc.is64
			co := s.cie(c)
			if co != 0 {
				t.Fatal("CIE not at 0")
			}
			// A second CIE, so that a wrong pointer is noticed.
			c2 := c
			c2.dataAlign = -4
			co2 := s.cie(c2)
			s.fde(co, 0, false, fdeSpec{start: 0x1000, length: 0x10, insns: insns, is64: tc.is64})
			s.fde(co2, 0, false, fdeSpec{start: 0x1010, length: 0x10, insns: insns, is64: tc.is64})
			var tab *Table
			var err error
			if tc.debug {
				tab, err = NewDebugFrame(s.b, archX86)
			} else {
				s.terminator()
				tab, err = NewEHFrame(s.b, 0x2000, nil, 0, archX86)
			}
			if err != nil {
				t.Fatal(err)
			}
			fdes, err := tab.All()
			if err != nil {
				t.Fatal(err)
			}
			if len(fdes) != 2 {
				t.Fatalf("%d FDEs", len(fdes))
			}
			if fdes[0].CIE.Off != co || fdes[1].CIE.Off != co2 {
				t.Errorf("CIEs at %#x, %#x; want %#x, %#x", fdes[0].CIE.Off, fdes[1].CIE.Off, co, co2)
			}
			if fdes[1].CIE.DataAlign != -4 {
				t.Errorf("second CIE data alignment %d", fdes[1].CIE.DataAlign)
			}
			f, err := tab.Lookup(0x1015)
			if err != nil || f.Start != 0x1010 {
				t.Fatalf("Lookup: %+v %v", f, err)
			}
		})
	}
}

// TestDebugFrameIDZeroIsFDE: in .debug_frame an id of 0 is an FDE whose CIE
// is at offset 0, and an .eh_frame id of 0xffffffff is an FDE pointer.
func TestDebugFrameEHFrameIDs(t *testing.T) {
	c := x86CIE()
	c.aug, c.augData = "", nil
	// A .debug_frame CIE in .eh_frame is an FDE with a wild CIE pointer.
	s := newSection(true, 8, binary.LittleEndian, 0)
	s.cie(c)
	s.terminator()
	tab, _ := NewEHFrame(s.b, 0, nil, 0, archX86)
	if _, err := tab.All(); err == nil {
		t.Error(".debug_frame CIE accepted in .eh_frame")
	}
	// An .eh_frame CIE (id 0) in .debug_frame is an FDE pointing at 0,
	// which is itself: not a CIE.
	s = newSection(false, 8, binary.LittleEndian, 0)
	s.cie(c)
	tab, _ = NewDebugFrame(s.b, archX86)
	if _, err := tab.All(); err == nil {
		t.Error(".eh_frame CIE accepted in .debug_frame")
	}
}

// manyFDEs assembles an .eh_frame with n FDEs of varying sizes separated by
// gaps, in shuffled order, and returns it with the sorted hdr entries.
func manyFDEs(n int) (data []byte, entries [][2]uint64, ranges [][2]uint64) {
	s := newSection(false, 8, binary.LittleEndian, testEHAddr)
	co := s.cie(x86CIE())
	pc := uint64(0x10000)
	type fr struct{ start, size uint64 }
	var frs []fr
	for i := 0; i < n; i++ {
		size := uint64(1 + (i*37)%200)
		frs = append(frs, fr{pc, size})
		pc += size + uint64(i%3)*8 // some gaps
	}
	// Shuffle deterministically: the linear index must sort.
	for i := range frs {
		j := (i * 7919) % len(frs)
		frs[i], frs[j] = frs[j], frs[i]
	}
	offs := map[uint64]uint64{}
	for _, f := range frs {
		off := s.fde(co, 0x1b, true, fdeSpec{start: f.start, length: f.size, insns: cat(0x41, 0x0e, uleb(16))})
		offs[f.start] = off
	}
	s.terminator()
	// Sorted entries.
	starts := make([]uint64, 0, len(frs))
	sizes := map[uint64]uint64{}
	for _, f := range frs {
		starts = append(starts, f.start)
		sizes[f.start] = f.size
	}
	sortU64(starts)
	for _, st := range starts {
		entries = append(entries, [2]uint64{st, offs[st]})
		ranges = append(ranges, [2]uint64{st, st + sizes[st]})
	}
	return s.b, entries, ranges
}

func sortU64(a []uint64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// TestEHFrameHdrLookup compares the .eh_frame_hdr binary search with the
// linear index for every PC around every FDE.
func TestEHFrameHdrLookup(t *testing.T) {
	data, entries, ranges := manyFDEs(300)
	const hdrAddr = 0x1000
	hdr := ehHdr(binary.LittleEndian, hdrAddr, testEHAddr, entries)
	withHdr, err := NewEHFrame(data, testEHAddr, hdr, hdrAddr, archX86)
	if err != nil {
		t.Fatal(err)
	}
	if withHdr.hdr == nil || withHdr.tabN != len(entries) {
		t.Fatalf("hdr not used (tabN %d)", withHdr.tabN)
	}
	linear, _ := NewEHFrame(data, testEHAddr, nil, 0, archX86)
	all, err := linear.All()
	if err != nil || len(all) != len(ranges) {
		t.Fatalf("All: %d FDEs, %v", len(all), err)
	}
	lo, hi := ranges[0][0]-4, ranges[len(ranges)-1][1]+4
	checked := 0
	for pc := lo; pc < hi; pc++ {
		f1, err1 := withHdr.Lookup(pc)
		f2, err2 := linear.Lookup(pc)
		if err1 != err2 && !(errors.Is(err1, ErrNoFDE) && errors.Is(err2, ErrNoFDE)) {
			t.Fatalf("pc %#x: hdr err %v, linear err %v", pc, err1, err2)
		}
		if err1 != nil {
			continue
		}
		if f1.Off != f2.Off || pc < f1.Start || pc >= f1.End {
			t.Fatalf("pc %#x: hdr FDE %#x [%#x,%#x), linear FDE %#x", pc, f1.Off, f1.Start, f1.End, f2.Off)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("nothing checked")
	}
}

func TestEHFrameHdrRejected(t *testing.T) {
	data, entries, _ := manyFDEs(10)
	good := ehHdr(binary.LittleEndian, 0x1000, testEHAddr, entries)
	bad := map[string][]byte{
		"version 2":   append([]byte{2}, good[1:]...),
		"truncated":   good[:len(good)-3],
		"omit table":  append([]byte{1, 0x1b, 0x03, 0xff}, good[4:]...),
		"uleb table":  append([]byte{1, 0x1b, 0x03, 0x31}, good[4:]...),
		"too short":   good[:3],
		"count large": append(append([]byte{}, good[:8]...), append([]byte{0xff, 0xff, 0, 0}, good[12:]...)...),
	}
	for name, hdr := range bad {
		t.Run(name, func(t *testing.T) {
			tab, err := NewEHFrame(data, testEHAddr, hdr, 0x1000, archX86)
			if err != nil {
				t.Fatal(err)
			}
			if tab.hdr != nil {
				t.Fatal("bad hdr kept")
			}
			if _, err := tab.Lookup(entries[3][0]); err != nil {
				t.Fatalf("linear fallback: %v", err)
			}
		})
	}
	// A hdr entry pointing outside .eh_frame is an error, not a panic.
	wild := ehHdr(binary.LittleEndian, 0x1000, testEHAddr, [][2]uint64{{entries[0][0], 1 << 20}})
	tab, _ := NewEHFrame(data, testEHAddr, wild, 0x1000, archX86)
	if _, err := tab.Lookup(entries[0][0]); err == nil || errors.Is(err, ErrNoFDE) {
		t.Fatalf("wild hdr entry: %v", err)
	}
}

func TestZeroTerminatorStopsEHFrame(t *testing.T) {
	data := buildEH(x86CIE(), nil)
	data = append(data, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3) // garbage after the terminator
	tab, _ := NewEHFrame(data, testEHAddr, nil, 0, archX86)
	fdes, err := tab.All()
	if err != nil || len(fdes) != 1 {
		t.Fatalf("All: %d, %v", len(fdes), err)
	}
}

func TestFormatErrors(t *testing.T) {
	good := buildEH(x86CIE(), cat(0x41))
	tests := map[string][]byte{
		"truncated length":        good[:2],
		"length past the section": cat(0xff, 0, 0, 0),
		"reserved length":         cat(0xf0, 0xff, 0xff, 0xff),
		"CIE pointer before":      append(append([]byte{}, good[:len(good)-4]...), cat(8, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0)...),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			tab, _ := NewEHFrame(data, testEHAddr, nil, 0, archX86)
			_, err := tab.All()
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a FormatError", err)
			}
		})
	}
	if _, err := NewEHFrame(nil, 0, nil, 0, Arch{PtrSize: 2}); err == nil {
		t.Error("pointer size 2 accepted")
	}
	if _, err := NewDebugFrame(nil, Arch{}); err == nil {
		t.Error("pointer size 0 accepted")
	}
}

// endsInError fails t unless err is what a case wants: an error saying
// want, or none when want is "". It reports whether the case ends there,
// with the error it wanted.
func endsInError(t *testing.T, what string, err error, want string) bool {
	t.Helper()
	switch {
	case want != "":
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s err = %v, want %q", what, err, want)
		}
		return true
	case err != nil:
		t.Fatalf("%s: %v", what, err)
	}
	return false
}
