package sentry

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/syncbuf"
)

// reports returns n real reports, copies of testdata's with ids of
// their own, and their bytes as stored.
func reports(t *testing.T, n int) []*report.Report {
	var out []*report.Report
	for i := 0; i < n; i++ {
		r, _ := loadReport(t, realReports[i%len(realReports)])
		r.ID = fmt.Sprintf("%08x%024x", 0xfeed0000+i, i)
		out = append(out, r)
	}
	return out
}

// logLines is the forwarder's log, which its goroutines write while the
// test reads it; each line goes to the test's log too.
type logLines struct {
	t *testing.T
	b syncbuf.Buffer
}

func (l *logLines) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	l.t.Log(s)
	fmt.Fprintln(&l.b, s)
}

// has reports whether a line so far holds sub (which has no newline).
func (l *logLines) has(sub string) bool { return strings.Contains(l.b.String(), sub) }

func newForwarder(t *testing.T, dsn *DSN, dir string, logs *logLines) *Forwarder {
	t.Helper()
	f, err := NewForwarder(Options{DSN: dsn, Dir: dir, Log: logs.logf, MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func flush(t *testing.T, f *Forwarder, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// Through resets, 429s (Retry-After and Sentry's rate-limit header), 5xx
// and an answer lost after Sentry took the event, every report arrives,
// and Sentry keeps each once.
func TestForwardThroughFaults(t *testing.T) {
	sentry := newFakeSentry(t)
	script := []fault{reset, pass, status503, tooMany, pass, lost, status500, pass, rateLimit, reset, status502, pass, lost}
	proxy := newFaultProxy(t, sentry.addr(), script...)
	logs := &logLines{t: t}
	f := newForwarder(t, sentry.dsn(t, proxy.addr()), filepath.Join(t.TempDir(), "sentry"), logs)
	defer f.Close()
	rs := reports(t, 12)
	for _, r := range rs {
		f.Stored(r.ID, nil, r, nil, "")
	}
	flush(t, f, 30*time.Second)

	receipts, stored := sentry.counts()
	if len(stored) != len(rs) {
		t.Fatalf("Sentry has %d events, %d reports stored", len(stored), len(rs))
	}
	for _, r := range rs {
		if stored[EventID(r.ID)] == 0 {
			t.Errorf("report %s never arrived", r.ID)
		}
	}
	pc := proxy.counts()
	// Each lost answer makes the one second copy Sentry drops, no more.
	if receipts != len(rs)+pc[lost] {
		t.Errorf("Sentry received %d envelopes for %d reports and %d lost answers", receipts, len(rs), pc[lost])
	}
	for _, fl := range script {
		if pc[fl] == 0 {
			t.Errorf("fault %s never happened", fl)
		}
	}
	st := f.Stats()
	if st.Sent != len(rs) || st.Waits != 2 || st.Dropped != 0 || st.Retries < 6 {
		t.Errorf("stats %+v, proxy %v", st, pc)
	}
	t.Logf("stats %+v; proxy %v", st, pc)
}

// A forwarder stopped half-way and started again on its directory sends
// what was left, and nothing Sentry already acknowledged, even when the
// collector hands it every report again.
func TestForwardRestart(t *testing.T) {
	sentry := newFakeSentry(t)
	proxy := newFaultProxy(t, sentry.addr(), pass, pass, pass, pass)
	proxy.setFailAll(true) // after four, Sentry is down
	dir := filepath.Join(t.TempDir(), "sentry")
	logs := &logLines{t: t}
	dsn := sentry.dsn(t, proxy.addr())
	rs := reports(t, 10)

	a := newForwarder(t, dsn, dir, logs)
	for _, r := range rs {
		a.Stored(r.ID, nil, r, nil, "")
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().Sent < 4 || a.Stats().Retries < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := NewForwarder(Options{DSN: dsn, Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use by another forwarder") {
		t.Errorf("a second forwarder on the directory: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	_, stored := sentry.counts()
	if len(stored) != 4 {
		t.Fatalf("Sentry has %d events before the restart, want 4", len(stored))
	}
	left, _ := filepath.Glob(filepath.Join(dir, "outbox", "*.json"))
	if len(left) != 6 {
		t.Fatalf("%d entries left in the outbox, want 6", len(left))
	}
	// A crash between the journal and the removal: the entry of an
	// acknowledged event is back in the outbox.
	var sentID string
	for id := range stored {
		sentID = id
	}
	if err := os.WriteFile(filepath.Join(dir, "outbox", fmt.Sprintf("%020d-%s.json", 1, sentID)), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}

	proxy.setFailAll(false)
	b := newForwarder(t, dsn, dir, logs)
	defer b.Close()
	for _, r := range rs {
		b.Stored(r.ID, nil, r, nil, "")
	}
	flush(t, b, 20*time.Second)
	receipts, stored := sentry.counts()
	if len(stored) != len(rs) || receipts != len(rs) {
		t.Errorf("after the restart Sentry received %d envelopes, %d events, for %d reports", receipts, len(stored), len(rs))
	}
	for id, n := range stored {
		if n != 1 {
			t.Errorf("event %s received %d times", id, n)
		}
	}
	if st := b.Stats(); st.Duplicates != len(rs) || st.Sent != 6 {
		t.Errorf("second forwarder: %+v", st)
	}
	journal, err := os.ReadFile(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(journal), " sent "); n != len(rs) {
		t.Errorf("journal has %d sent lines, want %d:\n%s", n, len(rs), journal)
	}
}

// A permanent 4xx drops the event with a log line and does not hold up
// the others.
func TestForwardDropsRefused(t *testing.T) {
	sentry := newFakeSentry(t)
	rs := reports(t, 3)
	sentry.refuse[EventID(rs[1].ID)] = 400
	logs := &logLines{t: t}
	dir := filepath.Join(t.TempDir(), "sentry")
	f := newForwarder(t, sentry.dsn(t, sentry.addr()), dir, logs)
	defer f.Close()
	for _, r := range rs {
		f.Stored(r.ID, nil, r, nil, "")
	}
	flush(t, f, 10*time.Second)
	_, stored := sentry.counts()
	if len(stored) != 2 || stored[EventID(rs[1].ID)] != 0 {
		t.Errorf("stored %v", stored)
	}
	if st := f.Stats(); st.Dropped != 1 || st.Sent != 2 || st.Attempts != 3 {
		t.Errorf("stats %+v", st)
	}
	if !logs.has("event " + EventID(rs[1].ID) + " refused, dropped: sentry: HTTP 400") {
		t.Error("no log line for the dropped event")
	}
	journal, _ := os.ReadFile(filepath.Join(dir, "journal"))
	if !strings.Contains(string(journal), EventID(rs[1].ID)+" dropped 400 ") {
		t.Errorf("journal:\n%s", journal)
	}
}

// Stored never waits: with Sentry hanging on the first request and a
// queue of four, a burst of reports returns at once; what does not fit is
// counted and logged, and Close still returns.
func TestForwardNeverBlocks(t *testing.T) {
	sentry := newFakeSentry(t)
	sentry.hang = make(chan struct{})
	logs := &logLines{t: t}
	f, err := NewForwarder(Options{DSN: sentry.dsn(t, sentry.addr()), Dir: t.TempDir(), Log: logs.logf, QueueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	rs := reports(t, 200)
	done := make(chan struct{})
	go func() {
		for _, r := range rs {
			f.Stored(r.ID, nil, r, nil, "")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stored blocked")
	}
	st := f.Stats()
	if st.QueueFull == 0 || st.QueueFull > len(rs)-4 {
		t.Errorf("stats %+v", st)
	}
	if !logs.has("queue full") {
		t.Error("no log line for the full queue")
	}
	closed := make(chan error)
	go func() { closed <- f.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked on a hanging Sentry")
	}
}

// The outbox's entries are whole or absent: a temp file left by a crash
// is removed at start and never sent.
func TestForwardIgnoresTornWrites(t *testing.T) {
	sentry := newFakeSentry(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "outbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, "outbox", ".tmp-123")
	os.WriteFile(torn, []byte(`{"event_id":`), 0o644)
	os.WriteFile(filepath.Join(dir, "journal"), []byte("0123456789abcdef0123456789abcdef sent 2026-11-26T00:00:00Z\n0123"), 0o644)
	logs := &logLines{t: t}
	f := newForwarder(t, sentry.dsn(t, sentry.addr()), dir, logs)
	defer f.Close()
	if _, err := os.Stat(torn); !os.IsNotExist(err) {
		t.Errorf("torn entry left: %v", err)
	}
	r := reports(t, 1)[0]
	f.Stored(r.ID, nil, r, nil, "sig")
	flush(t, f, 10*time.Second)
	if receipts, _ := sentry.counts(); receipts != 1 {
		t.Errorf("%d receipts", receipts)
	}
}

// While Sentry is away the outbox stops growing at MaxPending; what is
// pending is delivered once Sentry is back.
func TestForwardBoundsOutbox(t *testing.T) {
	sentry := newFakeSentry(t)
	proxy := newFaultProxy(t, sentry.addr())
	proxy.setFailAll(true)
	logs := &logLines{t: t}
	f, err := NewForwarder(Options{DSN: sentry.dsn(t, proxy.addr()), Dir: t.TempDir(), Log: logs.logf, MaxPending: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range reports(t, 10) {
		f.Stored(r.ID, nil, r, nil, "")
	}
	if st := f.Stats(); st.QueueFull != 7 || f.Pending() != 3 {
		t.Errorf("stats %+v, %d pending", st, f.Pending())
	}
	if !logs.has("3 reports not yet delivered") {
		t.Error("no log line for the full outbox")
	}
	proxy.setFailAll(false)
	flush(t, f, 10*time.Second)
	if _, stored := sentry.counts(); len(stored) != 3 {
		t.Errorf("Sentry has %d events, want 3", len(stored))
	}
}
