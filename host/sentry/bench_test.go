package sentry

import (
	"testing"

	"github.com/unwound-dev/unwound/report/decode"
)

// BenchmarkEvent converts real reports to event payloads, beside
// decoding the same report (the baseline every ingest already pays),
// and reports the payload's size.
func BenchmarkEvent(b *testing.B) {
	for _, name := range []string{"nullwrite", "threads", "recursion"} {
		r, raw := loadReport(b, name)
		b.Run(name+"/decode", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := decode.Report(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/event", func(b *testing.B) {
			var n int
			for i := 0; i < b.N; i++ {
				ev, err := NewEvent(Input{Report: r, Raw: raw})
				if err != nil {
					b.Fatal(err)
				}
				p, err := ev.Payload()
				if err != nil {
					b.Fatal(err)
				}
				n = len(p)
			}
			b.ReportMetric(float64(n), "payload-bytes")
		})
	}
}
