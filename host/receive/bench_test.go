package receive

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/uploader/httpup"
)

// BenchmarkHTTPReports: reports per second the uploader drains to `unwound
// serve`'s handler on loopback (read the entry, POST, wait for the durable
// 2xx, delete the entry), against a bare client POSTing the same bytes to
// the same handler with a fresh directory, in the same run (the baseline).
func BenchmarkHTTPReports(b *testing.B) {
	const n = 200
	server := func() *httptest.Server {
		st, err := NewStore(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		hs := httptest.NewServer(Handler(st, "", func(string, ...any) {}))
		b.Cleanup(hs.Close)
		return hs
	}
	var up, raw time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		q := testutil.Queue(b)
		want := testutil.Stage(b, q.Dir(), rand.New(rand.NewSource(int64(i))), 1, n, 20)
		hs := server()
		tr, err := httpup.New(httpup.Config{URL: hs.URL})
		if err != nil {
			b.Fatal(err)
		}
		u := &uploader.Uploader{Queue: q, Transport: tr, DeviceID: "bench"}
		b.StartTimer()
		start := time.Now()
		st, err := u.Drain(context.Background())
		up += time.Since(start)
		b.StopTimer()
		if err != nil || st.Delivered != n {
			b.Fatal(st, err)
		}
		tr.Close()

		hs2 := server()
		client := &http.Client{}
		start = time.Now()
		for id, body := range want {
			req, _ := http.NewRequest("POST", hs2.URL, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", "zstd")
			req.Header.Set("X-Unwound-Report-Id", id)
			resp, err := client.Do(req)
			if err != nil || resp.StatusCode != http.StatusCreated {
				b.Fatal(err, resp)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		raw += time.Since(start)
		client.CloseIdleConnections()
	}
	upRate := float64(n*b.N) / up.Seconds()
	rawRate := float64(n*b.N) / raw.Seconds()
	b.ReportMetric(upRate, "reports/s")
	b.ReportMetric(rawRate, "raw-POST-reports/s")
	b.ReportMetric(upRate/rawRate, "uploader/raw")
}
