package kuser

import (
	"debug/buildinfo"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestCheckMaps(t *testing.T) {
	const with = `00010000-00011000 r-xp 00000000 00:02 5 /bin/crash
befdf000-bf000000 rw-p 00000000 00:00 0 [stack]
ffff0000-ffff1000 r-xp 00000000 00:00 0 [vectors]
`
	if err := Check(strings.NewReader(with)); err != nil {
		t.Errorf("maps with [vectors]: %v", err)
	}
	for _, without := range []string{
		"00010000-00011000 r-xp 00000000 00:02 5 /bin/crash\nffff0000-ffff1000 r-xp 00000000 00:00 0 [sigpage]\n",
		"fffe0000-ffff0000 r-xp 00000000 00:00 0 [vectors]\n", // not covering the helpers
		"",
	} {
		if err := Check(strings.NewReader(without)); !errors.Is(err, ErrMissing) {
			t.Errorf("%q: err = %v, want ErrMissing", without, err)
		}
	}
}

// The host's own maps: an x86_64 or arm64 process never has [vectors].
func TestCheckSelfOnHost(t *testing.T) {
	if runtime.GOARCH == "arm" {
		t.Skip("a 32-bit ARM host")
	}
	if err := CheckSelf(); !errors.Is(err, ErrMissing) {
		t.Errorf("CheckSelf on %s = %v, want ErrMissing", runtime.GOARCH, err)
	}
}

// NeededBy reads what the go command records in real cross-built binaries.
func TestNeededByRealBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds a program three times")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte("package main\nfunc main() {}\n"), 0o644)
	for _, c := range []struct {
		arch, arm string
		want      bool
	}{{"arm", "5", true}, {"arm", "6", true}, {"arm", "7", false}, {"arm64", "", false}} {
		out := filepath.Join(dir, c.arch+c.arm)
		cmd := exec.Command("go", "build", "-o", out, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+c.arch, "GOARM="+c.arm, "GO111MODULE=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s/%s: %v\n%s", c.arch, c.arm, err, b)
		}
		bi, err := buildinfo.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if got := NeededBy(bi.Settings); got != c.want {
			t.Errorf("GOARCH=%s GOARM=%s: NeededBy = %v, want %v", c.arch, c.arm, got, c.want)
		}
	}
}
