package handler

import (
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/testkit/fixture"
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

// BenchmarkStackScan unwinds the table-less ARM threads crash (Thumb-2,
// -O2, dynamic, stripped; qemu-user core), where every thread's outermost
// frames are left to the validated stack scan, and reports its cost as a
// ratio against the same crash with stack_scan = false, measured in the
// same run: the scan tests thousands of words that point nowhere, and
// must not cost a failed read and a page of garbage each.
func BenchmarkStackScan(b *testing.B) {
	dir := fixture.Build(b, "arm")
	bin := fixture.Binary{Arch: "arm", Variant: "O2-dynamic-notables", Prog: "crash", Dir: dir}
	core, kernel := fixture.Core(b, bin, "threads")
	run := func(scan bool) {
		cfg := config.Default()
		cfg.Handler.StackScan = scan
		o := OfflineOptions{CoreFile: core, Sysroot: fixture.Sysroot("arm"), Config: cfg, Log: NewLogger(io.Discard)}
		if !kernel {
			o.Exe = bin.Stripped()
		}
		if _, err := Offline(o); err != nil {
			b.Fatal(err)
		}
	}
	measure := func(scan bool) (ns, bytes float64) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before, start := ms.TotalAlloc, time.Now()
		for i := 0; i < b.N; i++ {
			run(scan)
		}
		runtime.ReadMemStats(&ms)
		return float64(time.Since(start).Nanoseconds()) / float64(b.N), float64(ms.TotalAlloc-before) / float64(b.N)
	}
	b.ResetTimer()
	base, baseB := measure(false)
	with, withB := measure(true)
	b.StopTimer()
	b.ReportMetric(with, "ns/crash")
	b.ReportMetric(with/base, "x-no-scan-time")
	b.ReportMetric(withB/baseB, "x-no-scan-bytes")
}
