package handler

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"golang.org/x/sys/unix"
)

// offlineWithin runs Offline with a 2 s deadline and fails the test if it
// has not returned 5 s after it: a blocking open never returns.
func offlineWithin(t *testing.T, o OfflineOptions) (*time.Duration, []string, []string) {
	t.Helper()
	cfg := config.Default()
	cfg.Handler.Deadline = config.Duration(2 * time.Second)
	o.Config, o.Log = cfg, NewLogger(io.Discard)
	type result struct {
		errs, mods []string
		err        error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := Offline(o)
		var res result
		res.err = err
		if r != nil {
			res.errs = r.Errors
			for _, m := range r.Modules {
				res.mods = append(res.mods, m.Path)
			}
		}
		done <- res
	}()
	select {
	case res := <-done:
		took := time.Since(start)
		if res.err != nil {
			t.Fatal(res.err)
		}
		t.Logf("Offline returned in %v (deadline %v)", took.Round(time.Microsecond), cfg.Handler.Deadline.D())
		if took >= cfg.Handler.Deadline.D() {
			t.Errorf("Offline took %v, past its deadline", took)
		}
		return &took, res.errs, res.mods
	case <-time.After(cfg.Handler.Deadline.D() + 3*time.Second):
		t.Fatalf("Offline blocked: no report %v after its start, deadline %v", time.Since(start).Round(time.Millisecond), cfg.Handler.Deadline.D())
	}
	return nil, nil, nil
}

// fifoCore is a real core without NT_FILE (qemu-user's, aarch64): the
// offline handler places --exe from the auxiliary vector and finds the
// libraries through the link map in the core's memory.
func fifoCore(t *testing.T) (fixture.Binary, string) {
	if testing.Short() {
		t.Skip("builds fixtures and runs qemu-user: not in -short")
	}
	b := fixture.Binary{Arch: "aarch64", Variant: "O0-dynamic", Prog: "crash", Dir: fixture.Build(t, "aarch64")}
	core, kernel := fixture.Core(t, b, "nullwrite")
	if kernel {
		t.Skip("the host writes kernel cores (with NT_FILE) for aarch64")
	}
	return b, core
}

// TestOfflineExeFIFO: --exe naming a FIFO that no one writes to costs the
// program's module, with an error saying why, before the deadline; a
// plain open(2) waited for a writer forever.
func TestOfflineExeFIFO(t *testing.T) {
	b, core := fifoCore(t)
	fifo := filepath.Join(t.TempDir(), "crash")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs, _ := offlineWithin(t, OfflineOptions{CoreFile: core, Exe: fifo, Sysroot: fixture.Sysroot(b.Arch)})
	if !strings.Contains(strings.Join(errs, "\n"), fifo+": not a regular file (a FIFO)") {
		t.Errorf("the report does not say --exe is a FIFO: %q", errs)
	}
}

// TestOfflineLinkMapFIFO: a library path read from the core's link map
// that names a FIFO in the sysroot costs that library only: the report
// names it, keeps the other modules, and comes before the deadline.
func TestOfflineLinkMapFIFO(t *testing.T) {
	b, core := fifoCore(t)
	// The libraries the link map names, from a run on the real sysroot.
	_, errs, mods := offlineWithin(t, OfflineOptions{CoreFile: core, Exe: b.Stripped(), Sysroot: fixture.Sysroot(b.Arch)})
	var libc string
	root := t.TempDir()
	for _, m := range mods {
		if !strings.HasPrefix(m, "/") || m == b.Stripped() || strings.HasPrefix(m, "[") {
			continue
		}
		p := filepath.Join(root, m)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if strings.Contains(filepath.Base(m), "libc.so") {
			libc = m
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Symlink(filepath.Join(fixture.Sysroot(b.Arch), m), p); err != nil {
			t.Fatal(err)
		}
	}
	if libc == "" {
		t.Fatalf("no libc among the modules %q (errors %q)", mods, errs)
	}
	_, errs2, mods2 := offlineWithin(t, OfflineOptions{CoreFile: core, Exe: b.Stripped(), Sysroot: root})
	if !strings.Contains(strings.Join(errs2, "\n"), libc+": "+filepath.Join(root, libc)+": not a regular file (a FIFO)") {
		t.Errorf("the report does not name the FIFO %s: %q", libc, errs2)
	}
	have := map[string]bool{}
	for _, m := range mods2 {
		have[m] = true
	}
	for _, m := range mods {
		if m != libc && !have[m] {
			t.Errorf("module %s lost with the FIFO: %q", m, mods2)
		}
	}
}

// TestOfflineReportsConfigErrors: offline reports carry what is wrong
// with the config in errors, naming the key and line, as kernel-mode
// reports do.
func TestOfflineReportsConfigErrors(t *testing.T) {
	b, core := fifoCore(t)
	p := filepath.Join(t.TempDir(), "unwound.toml")
	os.WriteFile(p, []byte("[queue]\ndir = \"/data/q\"\n[handler]\nmax_threads = 1.5\n"), 0o644)
	cfg, cfgErr := config.LoadOrDefault(p)
	if cfg.Queue.Dir != "/data/q" {
		t.Errorf("queue.dir lost: %q", cfg.Queue.Dir)
	}
	_, errs, _ := offlineWithin(t, OfflineOptions{CoreFile: core, Exe: b.Stripped(), Sysroot: fixture.Sysroot(b.Arch), ConfigErr: cfgErr})
	if want := p + ":4: handler.max_threads: \"1.5\""; !strings.Contains(strings.Join(errs, "\n"), want) {
		t.Errorf("the report's errors lack %q: %q", want, errs)
	}
}
