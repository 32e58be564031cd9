package regular

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOpenRefusesWithoutBlocking: a FIFO with no writer (a plain open
// would wait forever), a directory and a character device are refused at
// once; a regular file and a symlink to one open.
func TestOpenRefusesWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("hello"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(file, link)
	for _, tc := range []struct {
		path, want string
	}{
		{fifo, "a FIFO"},
		{dir, "a directory"},
		{"/dev/null", "a character device"},
		{filepath.Join(dir, "missing"), "no such file"},
		{file, ""},
		{link, ""},
	} {
		done := make(chan error, 1)
		go func() {
			f, err := Open(tc.path)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s: %v", tc.path, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s: err = %v, want %q", tc.path, err, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Open blocked", tc.path)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v is not ErrNotExist", err)
	}
	b, err := ReadFile(file, 3)
	if err != nil || string(b) != "hell" {
		t.Errorf("ReadFile(max 3) = %q, %v; want the first 4 bytes", b, err)
	}
	if _, err := ReadFile(fifo, 3); err == nil {
		t.Error("ReadFile of a FIFO succeeded")
	}
}
