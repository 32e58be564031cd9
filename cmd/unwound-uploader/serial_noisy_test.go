package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/syncbuf"
)

// A noisy dedicated line: 1e-3 of the bytes lost and 1e-3 flipped each
// way, 2 % of the lines cut short, paced at 115200 baud with 8 ms of
// adapter latency each way.
var noisy = faults{bps: 11520, latency: 8 * time.Millisecond, drop: 1e-3, flip: 1e-3, truncate: 0.02}

// TestSerialNoisyLine: every report crosses the noisy line exactly once,
// byte-identical, in each framing, within 10 minutes for 100 reports
// (UNWOUND_SERIAL_LONG=1; `make test` sends 8 in each framing). It prints
// the goodput as a share of the line rate.
func TestSerialNoisyLine(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes over a paced relay")
	}
	n := 8
	if os.Getenv("UNWOUND_SERIAL_LONG") != "" {
		n = 100
	}
	if v, err := strconv.Atoi(os.Getenv("UNWOUND_SERIAL_REPORTS")); err == nil && v > 0 {
		n = v
	}
	for _, framing := range []string{"binary", "text"} {
		t.Run(framing, func(t *testing.T) {
			r := newRig(t, n, 1500, noisy)
			r.framing(t, framing)
			budget := 10 * time.Minute
			rx, rxLog := r.receiver(t, "--idle", budget.String())
			start := time.Now()
			up := r.uploader(t, "", "--once", "--tries", "1000", "--backoff", "200ms")
			var upOut syncbuf.Buffer
			up.Stdout, up.Stderr = &upOut, &upOut
			if err := up.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- up.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("uploader: %v\n%s\nreceiver:\n%s", err, &upOut, rxLog)
				}
			case <-time.After(budget):
				up.Process.Kill()
				<-done
				t.Fatalf("%d of %d reports stored in %v\n%s", strings.Count(rxLog.String(), ": stored"), n, budget, rxLog)
			}
			elapsed := time.Since(start)
			waitExit(t, rx, rxLog, 30*time.Second)
			log := rxLog.String()
			r.checkOnce(t, log)
			bytes := total(r.want)
			good := float64(bytes) / elapsed.Seconds()
			t.Logf("%s framing: %d/%d reports (%d bytes) exactly once in %v; goodput %.0f B/s = %.2f of the line rate (11520 B/s); relay: %s; uploader: %s",
				framing, n, n, bytes, elapsed.Round(time.Millisecond), good, good/11520, r.line.stats(), summary(upOut.String()))
			if os.Getenv("UNWOUND_SERIAL_LOG") != "" {
				t.Logf("uploader:\n%s\nreceiver:\n%s", &upOut, log)
			}
		})
	}
}

// summary counts the resends and the final chunk sizes the uploader
// logged.
func summary(log string) string {
	resends, timeouts, lines := 0, 0, 0
	last := ""
	for _, l := range strings.Split(log, "\n") {
		var n, to, c int
		if i := strings.Index(l, ".zst: "); i >= 0 {
			if _, err := fmt.Sscanf(l[i+6:], "%d data frames resent, %d timeouts, chunk now %d bytes", &n, &to, &c); err == nil {
				resends += n
				timeouts += to
				lines++
				last = strconv.Itoa(c)
			}
		}
	}
	return fmt.Sprintf("%d frames resent and %d timeouts over %d reports, last chunk %s bytes", resends, timeouts, lines, last)
}
