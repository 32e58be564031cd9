package cfi

import (
	"encoding/binary"
	"sync"
	"testing"
)

// TestConcurrentLookupRow: a Table is shared by whatever unwinds through
// the file, so Lookup and Row must be safe to call concurrently (run with
// -race).
func TestConcurrentLookupRow(t *testing.T) {
	// One CIE per FDE, looked up through .eh_frame_hdr: every goroutine
	// parses (and caches) CIEs.
	s := newSection(false, 8, binary.LittleEndian, testEHAddr)
	var entries, ranges [][2]uint64
	for i := 0; i < 64; i++ {
		co := s.cie(x86CIE())
		start := uint64(0x10000 + i*0x100)
		off := s.fde(co, 0x1b, true, fdeSpec{start: start, length: 0x80, insns: cat(0x41, 0x0e, uleb(16))})
		entries = append(entries, [2]uint64{start, off})
		ranges = append(ranges, [2]uint64{start, start + 0x80})
	}
	s.terminator()
	hdr := ehHdr(binary.LittleEndian, 0x1000, testEHAddr, entries)
	tab, _ := NewEHFrame(s.b, testEHAddr, hdr, 0x1000, archX86)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := range ranges {
				r := ranges[(i+g*7)%len(ranges)]
				f, err := tab.Lookup(r[0])
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := tab.Row(f, r[0]); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}
