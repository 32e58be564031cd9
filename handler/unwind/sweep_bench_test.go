package unwind

import (
	"os"
	"testing"

	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// BenchmarkCallTargets sweeps the host's libc for direct-call targets, as
// call-site validation does once per file on first use; "read" reads the
// same bytes alone, the baseline of the same run.
func BenchmarkCallTargets(b *testing.B) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(path); err != nil {
		b.Skip(err)
	}
	f := loadFile(b, path)
	start, size, ok := f.Code()
	if !ok {
		b.Skip("no code segment")
	}
	b.Run("read", func(b *testing.B) {
		buf := make([]byte, sweepChunk)
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			for off := uint64(0); off < size; off += sweepChunk {
				n := min(sweepChunk, size-off)
				if err := f.ReadCode(start+off, buf[:n]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("sweep", func(b *testing.B) {
		b.SetBytes(int64(size))
		var n int
		for i := 0; i < b.N; i++ {
			n = len(callTargets(arch.X86_64, f).all)
		}
		b.ReportMetric(float64(n), "targets")
	})
}
