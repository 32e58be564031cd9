package httpup_test

import (
	"context"
	"encoding/pem"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/uploader/httpup"
)

// server is a scripted receiver: it answers the first requests from
// script, then stores; it rejects reports whose comm is "bad".
type server struct {
	mu     sync.Mutex
	script []func(w http.ResponseWriter) bool
	got    map[string][]byte
	posts  int
	times  []time.Time
	token  string
	t      *testing.T
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts++
	s.times = append(s.times, time.Now())
	if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, "token", http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Content-Encoding") != "zstd" || r.Header.Get("X-Unwound-Device-Id") != "dev-1" {
		s.t.Errorf("headers: %v", r.Header)
	}
	if len(s.script) > 0 {
		step := s.script[0]
		s.script = s.script[1:]
		if step(w) {
			return
		}
	}
	body, _ := io.ReadAll(r.Body)
	rep, err := decode.Report(body)
	if err != nil || rep.ID != r.Header.Get("X-Unwound-Report-Id") {
		http.Error(w, "bad report", http.StatusBadRequest)
		return
	}
	if rep.Comm == "bad" {
		http.Error(w, "we do not take these", http.StatusBadRequest)
		return
	}
	if _, dup := s.got[rep.ID]; dup {
		w.WriteHeader(http.StatusOK)
		return
	}
	s.got[rep.ID] = body
	w.WriteHeader(http.StatusCreated)
}

func status(code int, retryAfter string) func(w http.ResponseWriter) bool {
	return func(w http.ResponseWriter) bool {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		http.Error(w, http.StatusText(code), code)
		return true
	}
}

func newUploader(t *testing.T, cfg httpup.Config) (*uploader.Uploader, string) {
	q := testutil.Queue(t)
	tr, err := httpup.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return &uploader.Uploader{Queue: q, Transport: tr, DeviceID: "dev-1", Log: t.Logf}, q.Dir()
}

func TestRetryAfterQuarantineToken(t *testing.T) {
	srv := &server{got: map[string][]byte{}, token: "s3cret", t: t,
		script: []func(http.ResponseWriter) bool{status(503, "1"), status(429, "")}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte("s3cret\n"), 0o600)
	u, dir := newUploader(t, httpup.Config{URL: hs.URL + "/v1/reports", Token: "wrong", TokenFile: tokFile})
	rng := rand.New(rand.NewSource(1))
	want := testutil.Fill(t, u.Queue, rng, 2, 100)
	_, bad := testutil.Report(rng, "bad", 10)
	u.Queue.Put(bad, "0")
	more := testutil.Fill(t, u.Queue, rng, 1, 100)
	for id, b := range more {
		want[id] = b
	}
	start := time.Now()
	st, err := u.Once(context.Background(), 5, &uploader.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if st.Delivered != 3 || st.Quarantined != 1 {
		t.Fatalf("%+v", st)
	}
	// 503 with Retry-After: 1 was honoured: the next request came ≥ 1 s later.
	if gap := srv.times[1].Sub(srv.times[0]); gap < time.Second {
		t.Fatalf("retried %v after a 503 with Retry-After: 1", gap)
	}
	if len(testutil.Entries(t, dir)) != 0 {
		t.Fatal("queue not empty")
	}
	if q := testutil.Entries(t, filepath.Join(dir, uploader.QuarantineDir)); len(q) != 1 {
		t.Fatalf("quarantine: %v", q)
	}
	if len(srv.got) != 3 {
		t.Fatalf("server got %d", len(srv.got))
	}
	for id, b := range want {
		if string(srv.got[id]) != string(b) {
			t.Fatalf("%s differs", id)
		}
	}
	t.Logf("%d posts in %v", srv.posts, time.Since(start).Round(time.Millisecond))
}

func TestKeptUntilAcknowledged(t *testing.T) {
	srv := &server{got: map[string][]byte{}, t: t}
	srv.script = []func(http.ResponseWriter) bool{status(500, ""), status(500, ""), status(500, "")}
	hs := httptest.NewServer(srv)
	u, dir := newUploader(t, httpup.Config{URL: hs.URL})
	testutil.Fill(t, u.Queue, rand.New(rand.NewSource(2)), 2, 10)
	if _, err := u.Once(context.Background(), 2, &uploader.Backoff{Min: time.Millisecond, Max: time.Millisecond}, time.Second); err == nil {
		t.Fatal("no error from 500s")
	}
	if n := len(testutil.Entries(t, dir)); n != 2 {
		t.Fatalf("%d entries left, want 2", n)
	}
	// A wrong token (401) is the board's configuration, not the report:
	// nothing is quarantined.
	srv.token = "other"
	if _, err := u.Drain(context.Background()); err == nil {
		t.Fatal("no error from 401")
	}
	if n := len(testutil.Entries(t, dir)); n != 2 {
		t.Fatalf("%d entries left after a 401, want 2", n)
	}
	// Network down: the server is gone; the entries stay.
	hs.Close()
	if _, err := u.Drain(context.Background()); err == nil {
		t.Fatal("no error with the server down")
	}
	if n := len(testutil.Entries(t, dir)); n != 2 {
		t.Fatalf("%d entries left with the server down, want 2", n)
	}
}

func TestTLSWithCA(t *testing.T) {
	srv := &server{got: map[string][]byte{}, t: t}
	hs := httptest.NewTLSServer(srv)
	defer hs.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}), 0o644)

	// Without the CA the server is not trusted: temporary, entry kept.
	u0, dir0 := newUploader(t, httpup.Config{URL: hs.URL})
	testutil.Fill(t, u0.Queue, rand.New(rand.NewSource(3)), 1, 10)
	if _, err := u0.Drain(context.Background()); err == nil {
		t.Fatal("untrusted server accepted")
	}
	if len(testutil.Entries(t, dir0)) != 1 {
		t.Fatal("entry lost")
	}

	u, dir := newUploader(t, httpup.Config{URL: hs.URL, CAFile: ca})
	want := testutil.Fill(t, u.Queue, rand.New(rand.NewSource(4)), 3, 50)
	st, err := u.Drain(context.Background())
	if err != nil || st.Delivered != 3 {
		t.Fatal(st, err)
	}
	if len(testutil.Entries(t, dir)) != 0 || len(srv.got) != 3 {
		t.Fatal("not drained")
	}
	for id := range want {
		if _, ok := srv.got[id]; !ok {
			t.Fatal(id)
		}
	}
}

func TestDaemonWakesOnNewReport(t *testing.T) {
	srv := &server{got: map[string][]byte{}, t: t}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	u, dir := newUploader(t, httpup.Config{URL: hs.URL})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- u.Run(ctx, time.Hour, &uploader.Backoff{Min: time.Second, Max: time.Minute}) }()
	time.Sleep(200 * time.Millisecond)
	testutil.Fill(t, u.Queue, rand.New(rand.NewSource(5)), 2, 10)
	deadline := time.Now().Add(5 * time.Second)
	for len(testutil.Entries(t, dir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not drain the new reports (inotify)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.got) != 2 {
		t.Fatalf("server got %d", len(srv.got))
	}
}

func TestRetryAfterParse(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "7": 7 * time.Second, "-1": 0, "junk": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		"99999999": 24 * time.Hour,
	} {
		if got := httpup.RetryAfter(v, now); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
