package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Config writes an unwound.toml whose queue is dir (allowed on a volatile
// file system, as a test's temporary directory is), then more, the test's
// own sections, and returns its path.
func Config(t testing.TB, dir, more string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "unwound.toml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("[queue]\ndir = %q\nallow_volatile = true\n%s", dir, more)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
