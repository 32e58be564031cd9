package loadtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestBombRSSAgainstBase: the server's peak RSS under 32 parallel zstd
// bombs, this tree's unwound serve against a baseline's (the commit in
// UNWOUND_BENCH_BASE, default main), in the same run. UNWOUND_BENCH_LOAD=1.
func TestBombRSSAgainstBase(t *testing.T) {
	if !benchLoad() {
		t.Skip("UNWOUND_BENCH_LOAD=1 builds a baseline unwound and compares")
	}
	base := os.Getenv("UNWOUND_BENCH_BASE")
	if base == "" {
		base = "main"
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	src := t.TempDir()
	testutil.Run(t, "sh", "-c", `git -C "$0" archive "$1" | tar -x -C "$2"`, strings.TrimSpace(string(top)), base, src)
	bin := filepath.Join(t.TempDir(), "unwound-base")
	build := exec.Command("go", "build", "-o", bin, "./cmd/unwound")
	build.Dir, build.Env = src, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", base, err, out)
	}
	for _, run := range []struct {
		name string
		wrap []string
	}{{base, []string{bin}}, {"this tree", nil}} {
		var s *server
		if run.wrap != nil {
			s = startServeBin(t, run.wrap[0], t.TempDir())
		} else {
			s = startServe(t, t.TempDir(), nil)
		}
		peak, after, codes := parallelBombs(t, s, 32)
		t.Logf("%-10s 32 parallel bombs (half declaring 1 GiB, half declaring nothing): %v; peak RSS %4d MiB, %4d MiB 2 s after the last answer",
			run.name, codes, peak>>10, after>>10)
	}
}
