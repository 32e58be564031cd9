package collector

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// BenchmarkPut stores reports one at a time (each its own transaction,
// as the HTTP handler does) with synchronous=FULL, the collector's
// setting, and with NORMAL, in the same run, and prints the ratio: what
// an fsync per acknowledged report costs here.
func BenchmarkPut(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	reports := make([][]byte, 400)
	for i := range reports {
		_, reports[i] = testutil.Report(rng, fmt.Sprintf("prog%d", i%7), 40)
	}
	rate := map[string]float64{}
	for _, mode := range []string{"NORMAL", "FULL"} {
		b.Run(mode, func(b *testing.B) {
			defer func(s string) { synchronous = s }(synchronous)
			synchronous = mode
			var total time.Duration
			n := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				c, err := Open(b.TempDir(), Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				for _, r := range reports {
					if _, _, inv, err := c.Put(r, ""); err != nil || inv != nil {
						b.Fatal(err, inv)
					}
				}
				total += time.Since(start)
				n += len(reports)
				b.StopTimer()
				c.Close()
				b.StartTimer()
			}
			rate[mode] = float64(n) / total.Seconds()
			b.ReportMetric(rate[mode], "reports/s")
		})
	}
	if rate["FULL"] > 0 {
		b.Logf("reports stored a second, one transaction each: NORMAL %.0f, FULL %.0f (FULL/NORMAL %.2f)", rate["NORMAL"], rate["FULL"], rate["FULL"]/rate["NORMAL"])
	}
}
