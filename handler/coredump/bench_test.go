package coredump

import (
	"io"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/elf"
)

// benchCore is a 256 MiB core of 64 segments of 4 MiB, streamed.
func benchCore() *synthCore {
	sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	sc.segs = nil
	const n, size = 64, 4 << 20 // 64 × 4 MiB = 256 MiB
	for i := 0; i < n; i++ {
		// Descending addresses: file order is not address order.
		sc.segs = append(sc.segs, synthSeg{vaddr: 0x7f0000000000 - uint64(i)*0x1000000, size: size, zero: true, flags: elf.PF_R | elf.PF_W})
	}
	return sc
}

// BenchmarkStreamSkip measures ReadHeader + Collect over a 256 MiB core
// kept to a 256 KiB window (the stack of the crashing thread, say), against
// io.Copy(io.Discard) of the same stream in the same run.
func BenchmarkStreamSkip(b *testing.B) {
	sc := benchCore()
	_, total, _ := sc.header()
	hdr, _, _ := sc.header()
	total += uint64(len(hdr))
	window := sc.segs[40].vaddr + 1<<20
	b.SetBytes(int64(total))
	b.ReportAllocs()
	var collect, discard time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r := sc.reader()
		c, s, err := ReadHeader(r, DefaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		m, err := s.Collect(c.Segments, func(sg Segment) []Range {
			return []Range{{window, window + 256<<10}}
		}, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		if m.Size() != 256<<10 {
			b.Fatalf("kept %d bytes", m.Size())
		}
		// Drain the rest, as the handler must for the kernel to finish.
		rest, _ := io.Copy(io.Discard, r)
		if uint64(s.Offset()+rest) != total {
			b.Fatalf("stream of %d bytes, want %d", s.Offset()+rest, total)
		}
		collect += time.Since(start)

		b.StopTimer()
		start = time.Now()
		if n, err := io.Copy(io.Discard, sc.reader()); err != nil || uint64(n) != total {
			b.Fatal(n, err)
		}
		discard += time.Since(start)
		b.StartTimer()
	}
	mb := float64(total) / (1 << 20) * float64(b.N)
	b.ReportMetric(mb/collect.Seconds(), "collect-MB/s")
	b.ReportMetric(mb/discard.Seconds(), "discard-MB/s")
	b.ReportMetric(discard.Seconds()/collect.Seconds(), "throughput-ratio")
}
