package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/host/sentry"
	"github.com/unwound-dev/unwound/host/sentry/sentrytest"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/offline"
	"github.com/unwound-dev/unwound/testkit/testbin"
)

// sentryStub is a real HTTP server taking envelopes as Sentry's endpoint
// does; every event must validate against Sentry's schema.
type sentryStub struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events map[string]json.RawMessage
	errs   []string
}

func newSentryStub(t *testing.T) *sentryStub {
	s := &sentryStub{events: map[string]json.RawMessage{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(msg string) {
			s.mu.Lock()
			s.errs = append(s.errs, msg)
			s.mu.Unlock()
			http.Error(w, msg, http.StatusBadRequest)
		}
		if r.URL.Path != "/api/7/envelope/" || !strings.Contains(r.Header.Get("X-Sentry-Auth"), "sentry_key=k3y") {
			fail(r.URL.Path + " " + r.Header.Get("X-Sentry-Auth"))
			return
		}
		body, _ := io.ReadAll(r.Body)
		env, err := sentry.ParseEnvelope(body)
		if err != nil {
			fail(err.Error())
			return
		}
		p, err := env.Event()
		if err != nil {
			fail(err.Error())
			return
		}
		if err := sentrytest.Validate(p); err != nil {
			fail(err.Error())
			return
		}
		s.mu.Lock()
		s.events[fmt.Sprint(env.Header["event_id"])] = append(json.RawMessage(nil), p...)
		s.mu.Unlock()
		fmt.Fprint(w, `{}`)
	}))
	t.Cleanup(func() {
		s.srv.Close()
		for _, e := range s.errs {
			t.Errorf("Sentry stub: %s", e)
		}
	})
	return s
}

func (s *sentryStub) dsn() string { return "http://k3y@" + s.srv.Listener.Addr().String() + "/7" }

func (s *sentryStub) event(id string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events[id]
}

func sentryReports(t *testing.T) (paths []string, reps []*report.Report) {
	for _, n := range []string{"nullwrite", "sighandler"} {
		p := filepath.Join("..", "..", "host", "sentry", "testdata", n+".json.zst")
		r, err := readReport(p)
		if err != nil {
			t.Fatal(err)
		}
		paths, reps = append(paths, p), append(reps, r)
	}
	return paths, reps
}

// `unwound sentry send` takes its DSN from SENTRY_DSN, as Sentry's tools
// do, and sends each report as an event.
func TestSentrySendCommand(t *testing.T) {
	bin := testbin.Build(t, "unwound", "")
	stub := newSentryStub(t)
	paths, reps := sentryReports(t)
	cmd := exec.Command(bin, append([]string{"sentry", "send"}, paths...)...)
	cmd.Env = append(os.Environ(), "SENTRY_DSN="+stub.dsn())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, r := range reps {
		id := sentry.EventID(r.ID)
		if stub.event(id) == nil || !strings.Contains(string(out), "sent as event "+id) {
			t.Errorf("report %s: no event %s\n%s", r.ID, id, out)
		}
	}
	// Bad DSNs are clear errors, and keys stay out of them.
	for dsn, want := range map[string]string{"": "give --dsn or set SENTRY_DSN", "https://s3cret@host": "no project id"} {
		cmd := exec.Command(bin, "sentry", "send", "--dsn", dsn, paths[0])
		cmd.Env = append(os.Environ(), "SENTRY_DSN=")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "s3cret") {
			t.Errorf("--dsn %q: %v\n%s", dsn, err, out)
		}
	}
}

// `unwound serve --forward-sentry DSN` forwards what it stores, once,
// and keeps its outbox and journal in DIR/sentry.
func TestServeForwardSentry(t *testing.T) {
	stub := newSentryStub(t)
	dir := t.TempDir()
	srv := testbin.Collector(t, "--dir", dir, "--forward-sentry", stub.dsn())
	paths, reps := sentryReports(t)
	for round := 0; round < 2; round++ { // the second round is duplicates
		for _, p := range paths {
			b, _ := os.ReadFile(p)
			resp, err := http.Post(srv.URL+"/", "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, r := range reps {
		for stub.event(sentry.EventID(r.ID)) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("report %s not forwarded", r.ID)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	srv.Stop()
	journal, err := os.ReadFile(filepath.Join(dir, "sentry", "journal"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(journal), " sent "); n != len(reps) {
		t.Errorf("journal:\n%s", journal)
	}
}

// A real crash, symbolized on the host with --debug-dir: the event's
// frames carry functions, files and lines.
func TestSentrySendSymbolized(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and crashes a program: not in -short")
	}
	for _, tool := range []string{"gcc", "objcopy", "strip", "readelf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	if !fixture.HostCoresUsable() {
		t.Skip("the host's core_pattern does not write core files")
	}
	bin := testbin.Build(t, "unwound", "")
	tmp := t.TempDir()
	prog := filepath.Join(tmp, "crash")
	run(t, "gcc", "-O1", "-g", "-o", prog, filepath.Join(fixture.Root(), "testdata", "crash", "crash.c"), "-pthread")
	r0, err := readelfBuildID(prog)
	if err != nil {
		t.Fatal(err)
	}
	dbg := filepath.Join(tmp, "debug", ".build-id", r0[:2], r0[2:]+".debug")
	os.MkdirAll(filepath.Dir(dbg), 0o755)
	run(t, "objcopy", "--only-keep-debug", prog, dbg)
	run(t, "strip", "--strip-debug", "--strip-unneeded", prog)
	work := filepath.Join(tmp, "run")
	os.Mkdir(work, 0o755)
	c := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+prog+" nullwrite")
	c.Dir = work
	c.Run() // it crashes
	cores, _ := filepath.Glob(filepath.Join(work, "core*"))
	if len(cores) == 0 {
		t.Skip("no core written")
	}
	r := offline.Report(t, cores[0], "/", prog)
	rep := filepath.Join(tmp, r.ID+".json.zst")
	writeReport(t, r, rep)

	stub := newSentryStub(t)
	run(t, bin, "sentry", "send", "--dsn", stub.dsn(), "--debug-dir", filepath.Join(tmp, "debug"), rep)
	var ev struct {
		Exception struct {
			Values []struct {
				Stacktrace struct {
					Frames []struct {
						Function, Filename, Package string
						Lineno                      int
					}
				}
			}
		}
	}
	if err := json.Unmarshal(stub.event(sentry.EventID(r.ID)), &ev); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range ev.Exception.Values[0].Stacktrace.Frames {
		if f.Package == prog {
			got = append(got, fmt.Sprintf("%s@%s:%v", f.Function, f.Filename, f.Lineno > 0))
		}
	}
	t.Logf("frames in the program, oldest first: %q", got)
	// Oldest first: main calls nw1, nw2, nw3, then null_write faults.
	want := []string{"main@crash.c:true", "nw1@crash.c:true", "nw2@crash.c:true", "nw3@crash.c:true", "null_write@crash.c:true"}
	if len(got) < len(want) || strings.Join(got[len(got)-len(want):], " ") != strings.Join(want, " ") {
		t.Errorf("frames in the program, oldest first: %q, want them to end with %q", got, want)
	}
}

// readelfBuildID reads a file's GNU build ID as readelf prints it.
func readelfBuildID(path string) (string, error) {
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		if _, id, ok := strings.Cut(l, "Build ID: "); ok {
			return strings.TrimSpace(id), nil
		}
	}
	return "", fmt.Errorf("%s: no build ID", path)
}
