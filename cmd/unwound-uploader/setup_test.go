package main

// What the uploader says about the board's setup: its configuration
// (--check-config) and, at start, the kernel's crash settings (drift).

import (
	"bytes"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestCheckConfig: --check-config exits 1 and names each bad key with
// its line, so a postinst or a CI step catches a typo before a crash does;
// a good file and a missing one exit 0.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[queue]\ndir = \"/data/q\"\n[handler]\nmax_threads = 1.5\nmax_frame = 3\n[rate_limit]\ncount = 3\ncount = 4\n"), 0o644)
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("[queue]\ndir = \"/data/q\"\n"), 0o644)
	rc, out := runLogged("--config", bad, "--check-config")
	if rc != 1 {
		t.Errorf("bad config: exit %d, want 1", rc)
	}
	for _, want := range []string{
		bad + ":4: handler.max_threads: \"1.5\": not a string, integer or boolean",
		bad + ":5: handler.max_frame: unknown key",
		bad + ":8: rate_limit.count: set twice",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, p := range []string{good, filepath.Join(dir, "missing.toml")} {
		if rc, _ := runLogged("--config", p, "--check-config"); rc != 0 {
			t.Errorf("%s: exit %d, want 0", p, rc)
		}
	}
	if rc, _ := runLogged("--config", dir, "--check-config"); rc != 1 {
		t.Errorf("a directory as config: exit %d, want 1", rc)
	}
}

// TestUploaderLogsDrift: at start the uploader says when core_pattern,
// suid_dumpable or core_pipe_limit are not what unwound needs.
func TestUploaderLogsDrift(t *testing.T) {
	rc, out := onceWith(t, "|/usr/share/apport/apport %p")
	if rc != 0 {
		t.Fatalf("--once on an empty queue: %d\n%s", rc, out)
	}
	for _, want := range []string{"drift: kernel.core_pattern is \"|/usr/share/apport/apport %p\": Ubuntu's apport", "drift: kernel.core_pipe_limit is 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("uploader log lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "drift: ") != 2 {
		t.Errorf("uploader log:\n%s", out)
	}
}

// onceWith runs the uploader --once on an empty queue with a stand-in
// /proc/sys: this core_pattern, core_pipe_limit 0 and suid_dumpable 2. It
// returns the exit status and the log.
func onceWith(t *testing.T, corePattern string) (int, string) {
	dir := t.TempDir()
	for rel, v := range map[string]string{"kernel/core_pattern": corePattern, "kernel/core_pipe_limit": "0", "fs/suid_dumpable": "2"} {
		os.MkdirAll(filepath.Join(dir, "proc", filepath.Dir(rel)), 0o755)
		os.WriteFile(filepath.Join(dir, "proc", rel), []byte(v+"\n"), 0o644)
	}
	cfg := testutil.Config(t, t.TempDir(), "[upload]\nurl = \"http://127.0.0.1:9/\"\n")
	procSys = filepath.Join(dir, "proc")
	defer func() { procSys = "" }()
	return runLogged("--config", cfg, "--once")
}

// runLogged runs the uploader with args and returns its exit status and
// what it logged.
func runLogged(args ...string) (int, string) {
	var out bytes.Buffer
	log.SetOutput(&out)
	defer log.SetOutput(os.Stderr)
	rc := run(args)
	return rc, out.String()
}

// TestUploaderLogsSocketDrift: with unwound's coredump socket line and no
// socket there (the server is not running), the kernel writes nothing
// anywhere; the uploader says so at start. A socket line of another tool
// is named as such.
func TestUploaderLogsSocketDrift(t *testing.T) {
	if _, err := os.Stat("/run/unwound/coredump.sock"); err == nil {
		t.Skip("a coredump socket server runs here")
	}
	for pattern, want := range map[string]string{
		"@@/run/unwound/coredump.sock":    "but there is no socket at /run/unwound/coredump.sock: the kernel drops every core",
		"@@/run/systemd/coredumpd/kernel": "systemd-coredumpd's coredump socket",
	} {
		rc, out := onceWith(t, pattern)
		if rc != 0 {
			t.Fatalf("--once: %d\n%s", rc, out)
		}
		// core_pipe_limit 0 is no drift under @@: the server asks the
		// kernel to wait.
		if !strings.Contains(out, want) || strings.Count(out, "drift: ") != 1 {
			t.Errorf("%s: uploader log lacks %q (or has more):\n%s", pattern, want, out)
		}
	}
}
