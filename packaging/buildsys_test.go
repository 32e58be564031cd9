package packaging

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The real build systems, run on the layer and the external tree: pristine
// release trees (a `git archive` of the release tag as a .tar.xz, or an
// unpacked directory) named by environment variables. `.ci/run` points them
// at ../shared/buildsys beside the repository; without them these tests
// skip with a line naming the variable.
const (
	envPoky        = "UNWOUND_POKY"           // poky scarthgap 5.0.15
	envBuildroot24 = "UNWOUND_BUILDROOT_2024" // Buildroot 2024.02.13 LTS
	envBuildroot25 = "UNWOUND_BUILDROOT_2025" // Buildroot 2025.02.16 LTS
)

// hostPath is the PATH the build systems run with: the distribution's
// python3 (with the modules they need, see scripts/deps.sh), never a
// per-user one (pyenv) that shadows it.
const hostPath = "/usr/bin:/bin:/usr/sbin:/sbin"

// buildsysTree returns the top directory of the release tree named by env
// (the single directory inside the archive, e.g. poky/ or buildroot/). A
// tarball is unpacked once into ~/.cache/unwound/buildsys/<name>-<sha256
// prefix>/ (temp directory + rename, so concurrent runs share it) and
// reused; the tests never write into it.
func buildsysTree(t *testing.T, env string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real build system")
	}
	src := os.Getenv(env)
	if src == "" {
		t.Skipf("%s is not set: set it to a release tarball or tree (see docs/packaging.md) to run this test", env)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatalf("%s=%s: %v", env, src, err)
	}
	dir := src
	if !st.IsDir() {
		dir = unpackCached(t, src)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 1 && entries[0].IsDir() {
		return filepath.Join(dir, entries[0].Name())
	}
	return dir
}

func unpackCached(t *testing.T, tarball string) string {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(home, ".cache", "unwound", "buildsys")
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(tarball), ".xz"), ".tar")
	dir := filepath.Join(cache, name+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, name+".tmp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.Command("tar", "-xJf", tarball, "-C", tmp).CombinedOutput(); err != nil {
		t.Fatalf("tar -xJf %s: %v\n%s", tarball, err, out)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr != nil { // not another run's rename
			t.Fatal(err)
		}
	}
	return dir
}

// goroot returns the GOROOT of Go version v (go1.22.12, go1.26.3), fetched
// by the go command from the module proxy into the module cache.
func goroot(t *testing.T, v string) string {
	t.Helper()
	cmd := exec.Command("go", "env", "GOROOT")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+v)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOTOOLCHAIN=%s go env GOROOT: %v", v, err)
	}
	root := strings.TrimSpace(string(out))
	if b, err := os.ReadFile(filepath.Join(root, "VERSION")); err != nil || !strings.HasPrefix(string(b), v+"\n") {
		t.Fatalf("%s/VERSION: %q %v, want %s", root, b, err, v)
	}
	return root
}

// runLogged runs cmd and returns its combined output, failing the test
// with the output's tail when it fails.
func runLogged(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, tail(string(out), 4000))
	}
	return string(out)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

// copyTree copies src to dst (cp -a).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}
