package symbolize

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/unwound-dev/unwound/testkit/fixture"
)

// TestDebuginfod fetches the program's debug file by build ID from a real
// HTTP server speaking debuginfod's protocol, after a first server that
// does not have it (404); the second symbolizer finds it in the cache
// without a request; a server that sends another build's file is refused
// on every frame and its file leaves the cache.
func TestDebuginfod(t *testing.T) {
	r, b, pm := layoutReport(t, "O2-dynamic")
	id := strings.ToLower(r.Modules[pm].BuildID)
	files := t.TempDir()
	good := filepath.Join(files, "good.debug")
	onlyKeepDebug(t, b.Unstripped(), good)
	other := filepath.Join(files, "other.debug")
	onlyKeepDebug(t, fixture.Binary{Arch: b.Arch, Variant: "O0-dynamic", Prog: "crash", Dir: b.Dir}.Unstripped(), other)

	var served atomic.Value
	served.Store(good)
	var hits, misses atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/buildid/"+id+"/debuginfo" {
			// The libraries' build IDs: not here.
			if !strings.HasPrefix(req.URL.Path, "/buildid/") || !strings.HasSuffix(req.URL.Path, "/debuginfo") {
				misses.Add(1)
			}
			http.NotFound(w, req)
			return
		}
		hits.Add(1)
		http.ServeFile(w, req, served.Load().(string))
	}))
	defer srv.Close()
	empty := httptest.NewServer(http.NotFoundHandler())
	defer empty.Close()

	cache := t.TempDir()
	d := &Debuginfod{URLs: []string{empty.URL, srv.URL + "/"}, Cache: cache}
	// The binary is not in the sysroot at all: debuginfod is the only source.
	symbolizeWith := func() *Result {
		s := New(Options{Sysroot: t.TempDir(), Debuginfod: d})
		defer s.Close()
		return s.Symbolize(r)
	}

	res := symbolizeWith()
	m := res.Modules[pm]
	cached := filepath.Join(cache, id, "debuginfo")
	if m.DebugHow != "debuginfod" || m.DebugFile != cached {
		t.Fatalf("debug file %q by %q; status %q, notes %v, mismatches %v", m.DebugFile, m.DebugHow, m.Status, m.Notes, m.Mismatches)
	}
	if !strings.Contains(strings.Join(m.Notes, " "), srv.URL+"/buildid/"+id+"/debuginfo") {
		t.Errorf("notes %v do not name the URL", m.Notes)
	}
	var got []string
	for _, f := range programFrames(res, pm) {
		got = append(got, locsString(f))
	}
	if s := strings.Join(got, " "); !strings.Contains(s, "null_write@") || !strings.Contains(s, "nw3@") {
		t.Errorf("program frames: %v", got)
	}
	if hits.Load() != 1 {
		t.Errorf("%d requests for the file, want 1", hits.Load())
	}

	// Cached: a new symbolizer asks no server.
	res = symbolizeWith()
	if res.Modules[pm].DebugFile != cached || hits.Load() != 1 {
		t.Errorf("second run: debug file %q, %d requests", res.Modules[pm].DebugFile, hits.Load())
	}

	// Another build's file under this build ID: refused, said on every
	// frame, dropped from the cache.
	os.RemoveAll(filepath.Join(cache, id))
	served.Store(other)
	res = symbolizeWith()
	m = res.Modules[pm]
	if m.DebugFile != "" || !strings.Contains(m.Status, "mismatch") {
		t.Fatalf("wrong file used: debug file %q, status %q", m.DebugFile, m.Status)
	}
	for _, f := range programFrames(res, pm) {
		if len(f.Locations) > 0 || !strings.Contains(f.Error, cached+": build-id") {
			t.Errorf("frame %v: locations %v, error %q", f.PC, f.Locations, f.Error)
		}
	}
	if _, err := os.Stat(cached); err == nil {
		t.Error("the refused file stayed in the cache")
	}
	if misses.Load() != 0 {
		t.Errorf("%d requests outside /buildid/ID/debuginfo", misses.Load())
	}
}

// TestDebuginfodDeadServer: a server that cannot be reached is said once
// and not asked again for the next build IDs.
func TestDebuginfodDeadServer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close() // nothing listens there now
	var hits atomic.Int32
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hits.Add(1)
		http.NotFound(w, req)
	}))
	defer live.Close()
	d := &Debuginfod{URLs: []string{addr, live.URL}, Cache: t.TempDir()}
	if _, _, err := d.fetch("ab12"); err == nil || !strings.Contains(err.Error(), "debuginfod: ") {
		t.Errorf("first fetch: %v", err)
	}
	path, _, err := d.fetch("cd34")
	if err != nil || path != "" {
		t.Errorf("second fetch: %q, %v (the dead server asked again?)", path, err)
	}
	if hits.Load() != 2 {
		t.Errorf("live server asked %d times, want 2", hits.Load())
	}
}

func TestDebuginfodFromEnv(t *testing.T) {
	t.Setenv("DEBUGINFOD_URLS", "")
	if DebuginfodFromEnv() != nil {
		t.Error("client without DEBUGINFOD_URLS")
	}
	t.Setenv("DEBUGINFOD_URLS", " https://a.example/  http://b.example ")
	t.Setenv("DEBUGINFOD_CACHE_PATH", "/tmp/dc")
	d := DebuginfodFromEnv()
	if d == nil || len(d.URLs) != 2 || d.URLs[1] != "http://b.example" || d.Cache != "/tmp/dc" {
		t.Errorf("%+v", d)
	}
	if _, _, err := d.fetch("../../etc"); err == nil {
		t.Error("a build id that is not hex was used in a path")
	}
}

// TestDebuginfodHeadersFile sends DEBUGINFOD_HEADERS_FILE's headers (a
// bearer token) with every request, as elfutils' client does, and skips
// lines that are not headers.
func TestDebuginfodHeadersFile(t *testing.T) {
	dir := t.TempDir()
	hf := filepath.Join(dir, "headers")
	os.WriteFile(hf, []byte("Authorization: Bearer sekrit\r\nnot a header\n X-Bad Name: 1\nX-Unwound: yes\n"), 0o600)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sekrit" || r.Header.Get("X-Unwound") != "yes" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("debug file"))
	}))
	defer srv.Close()
	t.Setenv("DEBUGINFOD_URLS", srv.URL)
	t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(dir, "cache"))
	t.Setenv("DEBUGINFOD_HEADERS_FILE", hf)
	d := DebuginfodFromEnv()
	if len(d.Header) != 2 {
		t.Errorf("headers %v, want Authorization and X-Unwound", d.Header)
	}
	path, from, err := d.fetch("abcd1234")
	if err != nil || path == "" || from == "" {
		t.Fatalf("fetch: %q %q %v", path, from, err)
	}
}
