package cfi

import (
	"encoding/binary"
	"os"
	"testing"
)

// BenchmarkLookupRow looks up the FDE and computes the row for a spread of
// PCs across libc.so.6: through .eh_frame_hdr's binary search, and through
// the linear index built from the section.
func BenchmarkLookupRow(b *testing.B) {
	if _, err := os.Stat(libcX86); err != nil {
		b.Skipf("%s: %v", libcX86, err)
	}
	tabs := loadELF(b, libcX86)
	fdes, err := tabs.linear.All()
	if err != nil || len(fdes) == 0 {
		b.Fatalf("All: %d FDEs, %v", len(fdes), err)
	}
	// 4096 PCs: every FDE in turn, at varying depths into it.
	var pcs []uint64
	for i := 0; len(pcs) < 4096; i++ {
		f := fdes[(i*7919)%len(fdes)]
		pcs = append(pcs, f.Start+(f.End-f.Start)*uint64(i%8)/8)
	}
	for _, bc := range []struct {
		name string
		tab  *Table
	}{{"hdr", tabs.withHdr}, {"linear", tabs.linear}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				pc := pcs[i%len(pcs)]
				f, err := bc.tab.Lookup(pc)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bc.tab.Row(f, pc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEval runs the expressions unwinding meets: x86-64 glibc's PLT
// CFA rule, a saved-register load through the CFA, and a branchy loop that
// touches the stack and arithmetic operators.
func BenchmarkEval(b *testing.B) {
	le := binary.LittleEndian
	skip := func(op byte, d int16) []byte { return cat(op, le.AppendUint16(nil, uint16(d))) }
	for _, bc := range []struct {
		name string
		expr []byte
	}{
		// DW_OP_breg7 8; DW_OP_breg16 0; lit15; and; lit11; ge; lit3; shl; plus
		{"plt", cat(0x77, sleb(8), 0x80, sleb(0), 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22)},
		{"saved", cat(0x77, sleb(8), 0x06, 0x23, uleb(16), 0x94, 4)},
		{"loop", cat(0x35, 0x12, skip(0x28, 3), skip(0x2f, 5), 0x31, 0x1c, skip(0x2f, -12))},
		{"consts", cat(0x08, 1, 0x0b, 0xfe, 0xff, 0x22, 0x0c, 1, 2, 3, 4, 0x1e, 0x10, uleb(300), 0x27, 0x11, sleb(-5), 0x21)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := &EvalContext{Regs: fuzzRegs(), Mem: fuzzMem(le), PtrSize: 8, Order: le, Initial: []uint64{0x8010}}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Eval(bc.expr, ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
