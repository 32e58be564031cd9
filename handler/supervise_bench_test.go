package handler

import (
	"testing"
	"time"
)

// BenchmarkSupervision measures what self-supervision costs per crash:
// the handler binary in kernel mode on the same core, with
// handler.supervise on and off, alternating; the unsupervised run is the
// baseline. Reported: both times per crash, the extra time, and the ratio.
func BenchmarkSupervision(b *testing.B) {
	bin := handlerBinary(b, "")
	core := stackCore()
	for i := 0; i < 6; i++ {
		core.threads = append(core.threads, synthThread{tid: 5000 + i, pc: 0x400100, lr: 0x400200, sp: 0x7ff0001000})
	}
	data := core.bytes()
	t := &testing.T{}
	var on, off time.Duration
	run := func(sup string) time.Duration {
		r := runHandler(t, bin, data, false, "supervise = "+sup)
		if r.rc != 0 || len(r.reports) != 1 || r.reports[0].Handler.Mode != "stream" {
			b.Fatalf("supervise=%s: exit %d, %d reports", sup, r.rc, len(r.reports))
		}
		return r.elapsed
	}
	run("true") // warm the page cache
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off += run("false")
		on += run("true")
	}
	b.StopTimer()
	n := time.Duration(b.N)
	b.ReportMetric(float64((off / n).Microseconds()), "µs/crash-unsupervised")
	b.ReportMetric(float64((on / n).Microseconds()), "µs/crash-supervised")
	b.ReportMetric(float64(((on - off) / n).Microseconds()), "µs-extra")
	b.ReportMetric(float64(on)/float64(off), "ratio")
}
