package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// CopyFile copies a program (or any file) to to, making its directory, as
// the tests lay out sysroots, staging and package trees: the copy is
// executable whatever the original's mode.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
