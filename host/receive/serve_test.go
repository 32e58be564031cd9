package receive

import (
	"bytes"
	"context"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/uploader/httpup"
)

// The uploader's HTTP transport against serve's handler: token, dedup,
// an invalid report quarantined.
func TestServeHandler(t *testing.T) {
	out := t.TempDir()
	st, _ := NewStore(out)
	hs := httptest.NewServer(Handler(st, "tok", t.Logf))
	defer hs.Close()
	q := testutil.Queue(t)
	want := testutil.Fill(t, q, rand.New(rand.NewSource(1)), 3, 40)
	os.WriteFile(filepath.Join(q.Dir(), "0000000009-00000000.json.zst"), []byte(`{"version":1,"id":"nothex"}`), 0o644)

	bad, _ := httpup.New(httpup.Config{URL: hs.URL, Token: "nope"})
	u := &uploader.Uploader{Queue: q, Transport: bad, Log: t.Logf}
	if _, err := u.Drain(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}
	tr, _ := httpup.New(httpup.Config{URL: hs.URL, Token: "tok"})
	u.Transport = tr
	s, err := u.Drain(context.Background())
	if err != nil || s.Delivered != 3 || s.Quarantined != 1 {
		t.Fatal(s, err)
	}
	testutil.Received(t, out, want)
	// The same report again is a duplicate (200), stored once.
	for id, b := range want {
		req, _ := http.NewRequest("POST", hs.URL, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("X-Unwound-Report-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatal(err, resp.Status)
		}
		// A mismatching announced id is refused.
		req, _ = http.NewRequest("POST", hs.URL, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("X-Unwound-Report-Id", strings.Repeat("0", 32))
		if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 400 {
			t.Fatal(resp.Status)
		}
		break
	}
	testutil.Received(t, out, want)
}

// The read token reads the Routes and the Pages see every request; it
// never posts a report, and the ingest token still does everything.
func TestReadToken(t *testing.T) {
	st, _ := NewStore(t.TempDir())
	o := ServeOptions{
		Token: "ingest", ReadToken: "read", Log: t.Logf,
		Routes: map[string]http.Handler{"/api/": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("api")) })},
		Pages:  map[string]http.Handler{"GET /{$}": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("page")) })},
	}
	s := httptest.NewServer(o.handler(st))
	defer s.Close()
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/api/groups", "read", 200},
		{"GET", "/api/groups", "ingest", 200},
		{"GET", "/api/groups", "", 401},
		{"GET", "/api/groups", "wrong", 401},
		{"POST", "/api/resymbolize", "read", 401},
		{"POST", "/api/resymbolize", "ingest", 200},
		{"POST", "/reports", "read", 401},
		{"GET", "/reports", "read", 401},
		{"GET", "/", "", 200}, // the page checks access itself
	} {
		req, _ := http.NewRequest(c.method, s.URL+c.path, strings.NewReader("{}"))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s with %q: %s, want %d", c.method, c.path, c.token, resp.Status, c.want)
		}
	}
}
