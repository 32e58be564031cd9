package symbolize

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/internal/fixture"
)

// BenchmarkSymbolize64Threads symbolizes a real report with 64 threads
// (testdata/threads64.c crashed on the host, its report made by the
// handler's offline mode from the core): cold, a new Symbolizer each time
// (debug files found, opened, verified, DWARF indexed), and cached, one
// Symbolizer for every run (files and indexes kept), both in every
// iteration (the cached run 10 times, after a GC, so the cold run's
// garbage is not billed to it). It reports frames per second for each and
// the cached figure as a ratio to cold.
func BenchmarkSymbolize64Threads(b *testing.B) {
	const cachedRuns = 10
	need(b, "gcc", "strip", "objcopy")
	arch := hostArch()
	src, _ := filepath.Abs(filepath.Join("testdata", "threads64.c"))
	text, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(text)
	root := filepath.Join(fixture.CacheDir(), "bench-symbolize", hex.EncodeToString(sum[:6]))
	bin := fixture.Binary{Arch: arch, Variant: "O2-dynamic", Prog: "threads64", Dir: filepath.Join(root, arch)}
	if _, err := os.Stat(bin.Stripped()); err != nil {
		os.MkdirAll(filepath.Dir(bin.Stripped()), 0o755)
		run(b, "gcc", "-g", "-O2", "-pthread", "-Wl,--build-id", "-o", bin.Unstripped(), src)
		run(b, "strip", "--remove-section=.comment", "--remove-section=.note", "-o", bin.Stripped()+".tmp", bin.Unstripped())
		if err := os.Rename(bin.Stripped()+".tmp", bin.Stripped()); err != nil {
			b.Fatal(err)
		}
	}
	r := crashReport(b, bin, "bench")
	if len(r.Threads) != 64 {
		b.Fatalf("%d threads in the report, want 64", len(r.Threads))
	}
	frames := 0
	for _, th := range r.Threads {
		frames += len(th.Frames)
	}
	debugDir := b.TempDir()
	buildIDTree(b, debugDir, bin.Unstripped())
	opts := Options{DebugDirs: []string{debugDir}, Sysroot: fixture.Sysroot(arch)}
	if st, err := os.Stat("/usr/lib/debug/.build-id"); err == nil && st.IsDir() && arch == "x86_64" {
		opts.DebugDirs = append(opts.DebugDirs, "/usr/lib/debug")
	}

	cachedS := New(opts)
	defer cachedS.Close()
	check := func(res *Result) {
		for _, th := range res.Threads {
			for _, f := range th.Frames {
				if f.Module >= 0 && len(f.Locations) == 0 {
					b.Fatalf("frame %v not symbolized: %s", f.PC, f.Error)
				}
			}
		}
	}
	check(cachedS.Symbolize(r))
	b.ResetTimer()
	var cold, cached time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s := New(opts)
		res := s.Symbolize(r)
		s.Close()
		cold += time.Since(t0)
		if len(res.Threads) != 64 {
			b.Fatal("threads lost")
		}
		runtime.GC()
		t1 := time.Now()
		for k := 0; k < cachedRuns; k++ {
			cachedS.Symbolize(r)
		}
		cached += time.Since(t1)
	}
	b.StopTimer()
	n := float64(frames) * float64(b.N)
	b.ReportMetric(n/cold.Seconds(), "cold-frames/s")
	b.ReportMetric(n*cachedRuns/cached.Seconds(), "cached-frames/s")
	b.ReportMetric(cold.Seconds()*cachedRuns/cached.Seconds(), "cached/cold")
	b.ReportMetric(float64(frames), "frames")
}
