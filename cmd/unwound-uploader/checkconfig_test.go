package main

import (
	"bytes"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	var out bytes.Buffer
	log.SetOutput(&out)
	defer log.SetOutput(os.Stderr)
	if rc := run([]string{"--config", bad, "--check-config"}); rc != 1 {
		t.Errorf("bad config: exit %d, want 1", rc)
	}
	for _, want := range []string{
		bad + ":4: handler.max_threads: \"1.5\": not a string, integer or boolean",
		bad + ":5: handler.max_frame: unknown key",
		bad + ":8: rate_limit.count: set twice",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, p := range []string{good, filepath.Join(dir, "missing.toml")} {
		if rc := run([]string{"--config", p, "--check-config"}); rc != 0 {
			t.Errorf("%s: exit %d, want 0", p, rc)
		}
	}
	if rc := run([]string{"--config", dir, "--check-config"}); rc != 1 {
		t.Errorf("a directory as config: exit %d, want 1", rc)
	}
}
