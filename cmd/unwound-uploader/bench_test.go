package main

import (
	"os"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// BenchmarkSerialGoodput115200: report bytes per second from the
// unwound-uploader binary to `unwound receive` through the relay paced at
// 115200 baud 8N1 with 8 ms adapter latency each way, as a fraction of
// what the same relay carries of raw bytes in the same run (the baseline;
// nominally 11,520 B/s), in text and in binary framing.
func BenchmarkSerialGoodput115200(b *testing.B) {
	f := faults{bps: 11520, latency: 8 * time.Millisecond}
	// Baseline: two seconds of raw bytes through the same relay.
	mA, sA, _ := pty(b)
	mB, sB, _ := pty(b)
	newRelay(f, mA, mB)
	wa, err := os.OpenFile(sA, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer wa.Close()
	rb, err := os.OpenFile(sB, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer rb.Close()
	const raw = 23040
	start := time.Now()
	go wa.Write(make([]byte, raw))
	buf := make([]byte, 4096)
	for got := 0; got < raw; {
		n, err := rb.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	line := float64(raw) / time.Since(start).Seconds()

	for _, framing := range []string{"text", "binary"} {
		b.Run(framing, func(b *testing.B) {
			var bytes int
			var elapsed time.Duration
			for i := 0; i < b.N; i++ {
				r := newRig(b, 4, 4000, f)
				r.framing(b, framing)
				rx, rxLog := r.receiver(b, "--idle", "120s")
				start := time.Now()
				out, err := r.uploader(b, "", "--once").CombinedOutput()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				elapsed += time.Since(start)
				rx.Wait()
				if os.Getenv("UNWOUND_SERIAL_LOG") != "" {
					b.Logf("uploader:\n%s\nreceiver:\n%s", out, rxLog)
				}
				testutil.Received(b, r.out, r.want)
				bytes += total(r.want)
			}
			good := float64(bytes) / elapsed.Seconds()
			b.ReportMetric(good, "report-B/s")
			b.ReportMetric(line, "line-B/s")
			b.ReportMetric(good/line, "goodput/line")
		})
	}
}
