// Package regular opens files that a crash handler must never block on.
//
// open(2) of a FIFO waits for a writer, and of a tty or some device may
// wait for a carrier or a driver: a path from a config, a command line or
// a crashed process's own memory can name any of them. O_NONBLOCK makes
// such an open return at once; the file is then accepted only when it is a
// regular file, so no later read blocks either (O_NONBLOCK has no effect
// on regular files). O_NOCTTY: a tty never becomes the controlling one.
package regular

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Flags are the open(2) flags Open uses, for callers that resolve paths
// themselves (openat2 under a root).
const Flags = unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY

func kind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}

// Open opens path for reading without blocking and returns it only if it
// is a regular file. An error from open(2) is an *os.PathError
// (errors.Is(err, os.ErrNotExist) holds for a missing file).
func Open(path string) (*os.File, error) {
	fd, err := unix.Open(path, Flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return Check(os.NewFile(uintptr(fd), path))
}

// Check returns f if it is a regular file, else closes it and says what it
// is.
func Check(f *os.File) (*os.File, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, errors.New(f.Name() + ": not a regular file (" + kind(st.Mode()) + ")")
	}
	return f, nil
}

// ReadFile is os.ReadFile through Open. It reads at most max+1 bytes, so
// that a caller can tell a file larger than max.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max+1))
}
