package handler

import (
	"io"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/internal/fixture"
)

// BenchmarkUnwindPerFrame walks the deep-recursion fixture (about 100,000
// frames, real kernel or qemu-user core, stripped binary) and reports the
// cost per frame, against the cost of the same core's report with one
// frame per thread as the baseline (core parsing, module loading).
func BenchmarkUnwindPerFrame(b *testing.B) {
	arch := "x86_64"
	if !fixture.Native(arch) {
		arch = "aarch64"
	}
	dir := fixture.Build(b, arch)
	bin := fixture.Binary{Arch: arch, Variant: "O2-dynamic", Prog: "crash", Dir: dir}
	core, kernel := fixture.Core(b, bin, "recursion")
	run := func(maxFrames int) (frames int) {
		cfg := config.Default()
		cfg.Handler.MaxFrames = maxFrames
		o := OfflineOptions{CoreFile: core, Sysroot: fixture.Sysroot(arch), Config: cfg, Log: NewLogger(io.Discard)}
		if !kernel {
			o.Exe = bin.Stripped()
		}
		r, err := Offline(o)
		if err != nil {
			b.Fatal(err)
		}
		return len(r.Threads[0].Frames) + r.Threads[0].Elided
	}
	b.ResetTimer()
	frames := 0
	for i := 0; i < b.N; i++ {
		frames = run(256)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(frames), "ns/frame")
	b.ReportMetric(float64(frames), "frames")
}
