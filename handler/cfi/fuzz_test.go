package cfi

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

// The fuzz targets feed arbitrary sections and expressions through every
// entry point: none may panic or run unbounded. Seeds are in
// testdata/fuzz/<FuzzName>; CFI_WRITE_SEEDS=1 go test -run TestWriteFuzzSeeds
// regenerates the hand-assembled ones.

const (
	fuzzEHAddr  = testEHAddr
	fuzzHdrAddr = 0x1000
)

func fuzzRegs() *regs.Set {
	var rs regs.Set
	for n := 0; n < 32; n++ {
		rs.Set(n, 0x8000+uint64(n)*8)
	}
	return &rs
}

func fuzzMem(order binary.ByteOrder) fakeMem {
	m := fakeMem{}
	for a := uint64(0x8000); a < 0x8200; a += 8 {
		m.put64(order, a, a+8)
	}
	return m
}

// exercise runs Lookup, Row and Step for pc and around every FDE.
func exercise(t *testing.T, tab *Table, a Arch, pc uint64) {
	fdes, _ := tab.All()
	pcs := []uint64{pc, pc - 1, 0, ^uint64(0)}
	for i, f := range fdes {
		if i >= 32 {
			break
		}
		pcs = append(pcs, f.Start, f.End-1, f.Start+(f.End-f.Start)/2)
	}
	rs := fuzzRegs()
	mem := fuzzMem(a.Order)
	for _, pc := range pcs {
		f, err := tab.Lookup(pc)
		if err != nil {
			continue
		}
		if pc < f.Start || pc >= f.End {
			t.Fatalf("Lookup(%#x) returned FDE [%#x,%#x)", pc, f.Start, f.End)
		}
		row, err := tab.Row(f, pc)
		if err != nil {
			continue
		}
		if row.Loc > pc || row.Loc < f.Start {
			t.Fatalf("Row(%#x).Loc = %#x outside [%#x, pc]", pc, row.Loc, f.Start)
		}
		row.Step(rs, mem, 7, a)
		row.Step(rs, nil, 7, a)
	}
}

func FuzzEHFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data, hdr []byte, pc uint64) {
		if len(hdr) == 0 {
			hdr = nil
		}
		for _, a := range []Arch{archX86, {PtrSize: 4, Order: binary.BigEndian}, archARM64} {
			tab, err := NewEHFrame(data, fuzzEHAddr, hdr, fuzzHdrAddr, a)
			if err != nil {
				t.Fatal(err)
			}
			exercise(t, tab, a, pc)
		}
	})
}

func FuzzDebugFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, pc uint64, ptr4 bool) {
		a := archX86
		if ptr4 {
			a = Arch{PtrSize: 4, Order: binary.BigEndian}
		}
		tab, err := NewDebugFrame(data, a)
		if err != nil {
			t.Fatal(err)
		}
		exercise(t, tab, a, pc)
	})
}

func FuzzEval(f *testing.F) {
	f.Fuzz(func(t *testing.T, expr []byte, initial uint64, ptr4 bool) {
		ctx := &EvalContext{Regs: fuzzRegs(), Mem: fuzzMem(binary.LittleEndian), PtrSize: 8, Order: binary.LittleEndian, Initial: []uint64{initial}}
		if ptr4 {
			ctx.PtrSize = 4
			ctx.Order = binary.BigEndian
		}
		Eval(expr, ctx)
	})
}

// Seeds.

func quoteSeed(vals ...any) string {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch x := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", x)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", x)
		case bool:
			fmt.Fprintf(&b, "bool(%v)\n", x)
		default:
			panic(fmt.Sprintf("seed %T", v))
		}
	}
	return b.String()
}

func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("CFI_WRITE_SEEDS") == "" {
		t.Skip("set CFI_WRITE_SEEDS=1 to rewrite testdata/fuzz seeds")
	}
	write := func(target, name string, vals ...any) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(quoteSeed(vals...)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	le := binary.LittleEndian

	// .eh_frame
	insns := cat(0x41, 0x0e, uleb(16), 0x80|rRBP, uleb(2), 0x43, 0x0d, uleb(rRBP), 0x0a, 0x41, 0x0b, 0x2e, uleb(8))
	one := buildEH(x86CIE(), insns)
	write("FuzzEHFrame", "one-fde", one, []byte(nil), uint64(0x1005))
	many, entries, _ := manyFDEs(8)
	hdr := ehHdr(le, fuzzHdrAddr, fuzzEHAddr, entries)
	write("FuzzEHFrame", "eight-fdes-with-hdr", many, hdr, entries[3][0]+1)
	write("FuzzEHFrame", "truncated-section", many[:len(many)/2], hdr, entries[0][0])
	write("FuzzEHFrame", "truncated-hdr", many, hdr[:len(hdr)-5], entries[7][0])
	expr := cat(0x77, sleb(8), 0x06)
	exprs := buildEH(x86CIE(), cat(0x0f, uleb(uint64(len(expr))), expr, 0x10, uleb(rRBX), uleb(uint64(len(expr))), expr,
		0x16, uleb(rRBP), uleb(3), 0x23, uleb(4), 0x96))
	write("FuzzEHFrame", "expressions", exprs, []byte(nil), uint64(0x1000))
	c := x86CIE()
	c.aug, c.augData = "zPLRS", cat(0x9b, []byte{1, 2, 3, 4}, 0x1b, 0x1b)
	s := newSection(false, 8, le, fuzzEHAddr)
	co := s.cie(c)
	s.fde(co, 0x1b, true, fdeSpec{start: 0x1000, length: 0x40, augData: []byte{0, 0, 0, 0}, insns: cat(0x01, le.AppendUint32(nil, 0xffffe000), 0x2d, 0x0e, uleb(32))})
	s.terminator()
	write("FuzzEHFrame", "augmentations-set-loc", s.b, []byte(nil), uint64(0x1010))
	c = x86CIE()
	c.is64 = true
	s = newSection(false, 8, le, fuzzEHAddr)
	co = s.cie(c)
	s.fde(co, 0x1b, true, fdeSpec{start: 0x1000, length: 0x40, insns: insns, is64: true})
	s.terminator()
	write("FuzzEHFrame", "dwarf64", s.b, []byte(nil), uint64(0x1002))

	// .debug_frame
	c = x86CIE()
	c.aug, c.augData, c.version = "", nil, 4
	s = newSection(true, 8, le, 0)
	co = s.cie(c)
	s.fde(co, 0, false, fdeSpec{start: 0x1000, length: 0x100, insns: cat(0x01, le.AppendUint64(nil, 0x1040), 0x0e, uleb(32), 0x0a, 0x44, 0x0b)})
	s.fde(co, 0, false, fdeSpec{start: 0x1100, length: 0x100, insns: insns})
	write("FuzzDebugFrame", "two-fdes", s.b, uint64(0x1044), false)
	write("FuzzDebugFrame", "truncated", s.b[:len(s.b)-7], uint64(0x1100), false)
	c.is64, c.version = true, 3
	s = newSection(true, 8, le, 0)
	co = s.cie(c)
	s.fde(co, 0, false, fdeSpec{start: 0x1000, length: 0x100, insns: insns, is64: true})
	write("FuzzDebugFrame", "dwarf64", s.b, uint64(0x1003), false)
	c.is64, c.version = false, 1
	s = newSection(true, 4, binary.BigEndian, 0)
	co = s.cie(c)
	s.fde(co, 0, false, fdeSpec{start: 0x1000, length: 0x100, insns: insns})
	write("FuzzDebugFrame", "32-bit-big-endian", s.b, uint64(0x1003), true)

	// Expressions.
	skip := func(op byte, d int16) []byte { return cat(op, le.AppendUint16(nil, uint16(d))) }
	write("FuzzEval", "breg-deref", cat(0x77, sleb(8), 0x06), uint64(0), false)
	write("FuzzEval", "plus-uconst", cat(0x23, uleb(16)), uint64(0x7000), false)
	write("FuzzEval", "loop", cat(0x35, 0x12, skip(0x28, 3), skip(0x2f, 5), 0x31, 0x1c, skip(0x2f, -12)), uint64(0), false)
	write("FuzzEval", "infinite", cat(0x31, skip(0x2f, -3)), uint64(0), false)
	write("FuzzEval", "arith", cat(0x11, sleb(-12), 0x34, 0x1b, 0x37, 0x1d, 0x32, 0x26, 0x19, 0x33, 0x2d), uint64(1), true)
	write("FuzzEval", "stack-ops", cat(0x31, 0x32, 0x33, 0x17, 0x16, 0x14, 0x15, 2, 0x12, 0x13, 0x94, 4), uint64(0x8000), true)
	write("FuzzEval", "div-by-zero", cat(0x31, 0x30, 0x1b), uint64(0), false)
	write("FuzzEval", "truncated-const", cat(0x0e, 1, 2), uint64(0), false)
}
