package footprint

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The toolchain the budgets are measured with: go.mod's oldest supported
// Go (Makefile GO122), fetched by the go command from the module proxy.
const toolchain = "go1.22.12"

// Budgets in bytes (1 MB = 10^6 bytes), stripped, for linux/arm GOARM=7.
const (
	// Issue 10 sets 2.5 MB for the handler, not met yet. Measured 2.82 MB
	// after the TOML and JSON rewrites, then 3.08 MB with `install` (its
	// self-test, sysctl handling) and the supervising parent, then
	// 2,818,200 B with our own zstd encoder (handler/zstdenc) in place of
	// klauspost/compress's, which linked every level. The rest is mostly
	// debug/elf and install. Until those shrink, this ceiling stops the
	// handler from growing; lower it as it shrinks.
	handlerTarget  = 2_500_000
	handlerCeiling = 2_860_000
	uploaderBudget = 6_000_000
	serialBudget   = 3_000_000 // -tags unwound_nohttp
)

func build(t *testing.T, dir, pkg, tags string) int64 {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg)+tags)
	args := []string{"build", "-trimpath", "-ldflags", "-s -w", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain, "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm", "GOARM=7")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestBinarySizes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds three binaries with " + toolchain)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, pkg, tags string
		budget          int64
	}{
		{"unwound-handler", "./cmd/unwound-handler", "", handlerCeiling},
		{"unwound-uploader", "./cmd/unwound-uploader", "", uploaderBudget},
		{"unwound-uploader (serial only)", "./cmd/unwound-uploader", "unwound_nohttp", serialBudget},
	} {
		size := build(t, dir, c.pkg, c.tags)
		t.Logf("%-31s %9d bytes, budget %9d (%.0f%%)", c.name, size, c.budget, 100*float64(size)/float64(c.budget))
		if size > c.budget {
			t.Errorf("%s: %d bytes, over its budget of %d", c.name, size, c.budget)
		}
		if c.pkg == "./cmd/unwound-handler" && size > handlerTarget {
			t.Logf("unwound-handler: %d bytes above issue 10's target of %d", size-handlerTarget, handlerTarget)
		}
	}
}

// TestHeavyPackagesStayOut keeps out of the board binaries what the
// budgets were won by removing (or, for net/http, what a serial-only board
// must not carry).
func TestHeavyPackagesStayOut(t *testing.T) {
	for _, c := range []struct {
		pkg, tags string
		banned    []string
	}{
		// The handler only writes reports: decoding them (encoding/json,
		// klauspost/compress) is for readers, in handler/report/read.
		{"./cmd/unwound-handler", "", []string{"net/http", "github.com/BurntSushi/toml", "regexp",
			"encoding/json", "github.com/klauspost/compress", "github.com/klauspost/compress/zstd"}},
		{"./cmd/unwound-uploader", "unwound_nohttp", []string{"net/http", "github.com/BurntSushi/toml"}},
	} {
		args := []string{"list", "-deps"}
		if c.tags != "" {
			args = append(args, "-tags", c.tags)
		}
		cmd := exec.Command("go", append(args, c.pkg)...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm", "GOARM=7")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", c.pkg, err)
		}
		deps := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			deps[p] = true
		}
		for _, b := range c.banned {
			if deps[b] {
				t.Errorf("%s (tags %q) imports %s", c.pkg, c.tags, b)
			}
		}
	}
}
