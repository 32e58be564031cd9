package cfi

import (
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
