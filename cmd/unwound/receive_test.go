package main

import (
	"bytes"
	"context"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
	st, _ := newDirStore(out)
	hs := httptest.NewServer(reportHandler(st, "tok", t.Logf))
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

// dump on the board, a noisy console, undump on the host.
func TestDumpUndump(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "../unwound-uploader", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	q := testutil.Queue(t)
	want := testutil.Fill(t, q, rand.New(rand.NewSource(2)), 3, 200)
	cfg := filepath.Join(dir, "unwound.toml")
	os.WriteFile(cfg, []byte("[queue]\ndir = \""+q.Dir()+"\"\nallow_volatile = true\n"), 0o644)
	armor, err := exec.Command(dir+"/unwound-uploader", "--config", cfg, "dump", "--remove").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(testutil.Entries(t, q.Dir())); n != 0 {
		t.Fatalf("dump --remove left %d", n)
	}
	// The console: CRLF and a kernel message between two lines.
	console := strings.ReplaceAll(string(armor), "\n", "\r\n")
	i := strings.Index(console, "=UW 0002")
	console = console[:i] + "[  99.000001] eth0: link down\r\n" + console[i:]
	log := filepath.Join(dir, "console.log")
	os.WriteFile(log, []byte(console), 0o644)
	rx := t.TempDir()
	if out, err := exec.Command(dir+"/unwound", "undump", "--out", rx, log).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	testutil.Received(t, rx, want)
	// A damaged line fails the report.
	j := strings.Index(console, "=UW 0003 ") + 15
	bad := console[:j] + string(console[j]^1) + console[j+1:]
	os.WriteFile(log, []byte(bad), 0o644)
	if out, err := exec.Command(dir+"/unwound", "undump", "--out", t.TempDir(), log).CombinedOutput(); err == nil {
		t.Fatalf("damaged armor accepted:\n%s", out)
	}
}
