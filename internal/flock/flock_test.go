package flock

import (
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExclusive: a second exclusive non-blocking lock on the same file is
// refused while the first is held and granted once it is closed; shared
// locks coexist.
func TestExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	a, err := Open(path, unix.LOCK_EX|unix.LOCK_NB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("second lock: %v, want EWOULDBLOCK", err)
	}
	a.Close()
	b, err := Open(path, unix.LOCK_SH|unix.LOCK_NB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := Open(path, unix.LOCK_SH|unix.LOCK_NB)
	if err != nil {
		t.Fatalf("second shared lock: %v", err)
	}
	c.Close()
}
