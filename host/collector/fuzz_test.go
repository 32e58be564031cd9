package collector

import (
	"testing"
	"time"
)

// FuzzExtras: a report's release object and device attributes (a
// board's words) never panic the reader, and labels stay bounded.
func FuzzExtras(f *testing.F) {
	f.Add([]byte(`{"release":{"ID":"poky","VERSION_ID":"5.0","IMAGE_VERSION":"2.4.1"},"device":{"attributes":{"hw_rev":"b"}}}`))
	f.Add([]byte(`{"release":{"id":1,"version_id":["x"]},"device":{"attributes":{"":"x","k":{}}}}`))
	f.Add([]byte(`{"release":"2.4.1","device":[]}`))
	f.Add([]byte("{\"release\":{\"image_version\":\"\xff\x01\"}}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		x := extras(b)
		if l := x.Release.Label(); len(l) > 300 || l == "" {
			t.Errorf("label %q", l)
		}
		if len(x.Attributes) > 64 {
			t.Errorf("%d attributes", len(x.Attributes))
		}
	})
}

// FuzzQuery: the query parameters of /api/groups never panic.
func FuzzQuery(f *testing.F) {
	f.Add("7d", "SIGSEGV", "5", "boards")
	f.Add("2026-11-26", "11", "-1", "x")
	f.Add("2026-11-26T10:00:00Z", "segv", "", "")
	f.Fuzz(func(t *testing.T, since, signal, limit, order string) {
		q := map[string]string{"since": since, "signal": signal, "limit": limit, "order": order}
		FilterFromQuery(func(k string) string { return q[k] })
		ParseSince(since, time.Now())
	})
}
