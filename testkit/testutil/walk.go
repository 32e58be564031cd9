package testutil

import (
	"io/fs"
	"path/filepath"
	"testing"
)

// Walk calls fn for every path below root (root itself excluded) with the
// path relative to root, its full path and its mode bits; an error of the
// walk fails the test. Install tests compare the trees they leave.
func Walk(t testing.TB, root string, fn func(rel, path string, mode fs.FileMode)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fn(rel, p, info.Mode())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
