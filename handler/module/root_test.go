package module

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Symlinks planted in a process's root resolve inside that root: an
// absolute link, a link climbing with "..", a directory link, a loop; a
// FIFO or a file nobody serves never holds the handler.
func TestOpenInRoot(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	outside := filepath.Join(tmp, "secret") // the handler's file, outside root
	write := func(p, s string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	write(outside, "OUTSIDE")
	write(filepath.Join(root, "lib/real.so"), "INSIDE real")
	write(filepath.Join(root, "secret"), "INSIDE secret")
	write(filepath.Join(root, outside), "INSIDE at the outside path")
	link(outside, filepath.Join(root, "lib/abs.so"))                            // absolute, to a path that exists in both
	link("/nowhere/"+outside, filepath.Join(root, "lib/dangling.so"))           // absolute, only outside
	link("../../../../../../../../secret", filepath.Join(root, "lib/climb.so")) // ".." past the root
	link("/lib", filepath.Join(root, "usr/lib"))                                // a merged-/usr layout
	link("loop-b", filepath.Join(root, "lib/loop-a"))                           // a loop
	link("loop-a", filepath.Join(root, "lib/loop-b"))                           //
	link("/proc/self/root"+outside, filepath.Join(root, "lib/magic.so"))        // through a magic link
	link(tmp+"/root/../secret", filepath.Join(root, "lib/abs-climb.so"))        // absolute with ".."
	if err := syscall.Mkfifo(filepath.Join(root, "lib/fifo.so"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ path, want string }{
		{"/lib/real.so", "INSIDE real"},
		{"/lib/abs.so", "INSIDE at the outside path"},
		{"/lib/dangling.so", ""},
		{"/lib/climb.so", "INSIDE secret"},
		{"/usr/lib/real.so", "INSIDE real"},
		{"/../../lib/real.so", "INSIDE real"},
		{"/lib/loop-a", ""},
		{"/lib/magic.so", ""},
		{"/lib/abs-climb.so", ""},
		{"/lib/fifo.so", ""},
		{"/lib/real.so/..", ""},
		{"/lib", ""},
	}
	for _, openat2 := range []bool{true, false} {
		useOpenat2 = openat2
		for _, tc := range cases {
			start := time.Now()
			r, c, err := openInRoot(root, tc.path)
			got := ""
			if err == nil {
				b, _ := io.ReadAll(io.NewSectionReader(r, 0, 1<<20))
				got = string(b)
				c.Close()
			}
			if got != tc.want || strings.Contains(got, "OUTSIDE") {
				t.Errorf("openat2 %v: %s: got %q (err %v), want %q", openat2, tc.path, got, err, tc.want)
			}
			if d := time.Since(start); d > OpTimeout {
				t.Errorf("openat2 %v: %s took %v", openat2, tc.path, d)
			}
		}
	}
	useOpenat2 = true
}

// A file that never answers (a FIFO opened without O_NONBLOCK stands in
// for a FUSE file served by the frozen process) costs at most OpTimeout,
// and once hung, every later read fails at once.
func TestBoundedFileOps(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := bounded(func() (*os.File, error) { return os.Open(fifo) }) // blocks: no writer
	if err != ErrTimeout || time.Since(start) > 2*OpTimeout {
		t.Fatalf("open: %v after %v", err, time.Since(start))
	}
	// A read that blocks: the read end of a FIFO whose writer is silent
	// (a FIFO has no ReadAt: plain Read stands in for a FUSE pread).
	w, err := os.OpenFile(fifo, os.O_RDWR, 0) // keeps a writer, writes nothing
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := os.Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	blocking := func() ([]byte, error) { q := make([]byte, 1); _, err := f.Read(q); return q, err }
	start = time.Now()
	if _, err := bounded(blocking); err != ErrTimeout {
		t.Fatalf("blocking read: %v", err)
	}
	if d := time.Since(start); d > 2*OpTimeout {
		t.Errorf("blocking read took %v", d)
	}
	// The deadline wins over OpTimeout.
	SetIODeadline(time.Now().Add(-time.Second))
	defer SetIODeadline(time.Time{})
	start = time.Now()
	if _, err := bounded(blocking); err != ErrTimeout || time.Since(start) > 50*time.Millisecond {
		t.Errorf("past the deadline: %v after %v", err, time.Since(start))
	}
}
