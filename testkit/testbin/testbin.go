// Package testbin builds the project's commands for the tests that run
// them: each command (with its build tags) once per test process, as the
// packages ship it (CGO_ENABLED=0), into a directory that Main removes when
// the tests end.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]*binary{} // by command and tags
)

type binary struct {
	once sync.Once
	path string
	err  error
}

// Build returns the path of cmd/<name> built with tags (comma-separated,
// "" for none), building it on the first call.
func Build(t testing.TB, name, tags string) string {
	t.Helper()
	mu.Lock()
	key := name + "+" + tags
	b := built[key]
	if b == nil {
		b = &binary{}
		built[key] = b
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "unwound-testbin-"); err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
	}
	d := dir
	mu.Unlock()
	b.once.Do(func() {
		sub := filepath.Join(d, tagDir(tags))
		if b.err = os.MkdirAll(sub, 0o755); b.err != nil {
			return
		}
		b.path = filepath.Join(sub, name)
		cmd := exec.Command("go", "build", "-tags", tags, "-o", b.path, "github.com/unwound-dev/unwound/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("building %s (tags %q): %v\n%s", name, tags, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// tagDir is the directory for binaries built with tags.
func tagDir(tags string) string {
	if tags == "" {
		return "plain"
	}
	return "tags-" + strings.ReplaceAll(tags, ",", "-")
}

// Main runs the tests and removes what Build built: call it from TestMain,
// os.Exit(testbin.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
	return code
}
