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

	"github.com/unwound-dev/unwound/internal/testutil"
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
