package module

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/internal/regular"
)

// Files of a crashed process are hostile in two ways.
//
// Paths: the process controls its own root. /proc/<pid>/root/usr/lib/x is
// walked by the kernel in the process's root, but an absolute symlink met
// on the way (planted as /usr/lib/x -> /etc/shadow) resolves against the
// *walker's* root: the handler's. So paths are resolved with openat2(2)
// RESOLVE_IN_ROOT under a descriptor of the root (Linux ≥ 5.6), or, where
// openat2 is missing, component by component with O_NOFOLLOW, symlinks
// read and resolved against the same root, ".." stopping there.
//
// Time: a file on a FUSE or NFS mount served by the crashed process, which
// the kernel holds frozen, never answers an open or a read. Every open and
// read runs with a timeout (OpTimeout, and never past the deadline set by
// SetIODeadline); a file that timed out once fails every later read at
// once. The blocked thread is abandoned: the handler is a one-shot process.

// OpTimeout bounds one open or read of a module file.
var OpTimeout = 500 * time.Millisecond

var ioDeadline atomic.Int64 // unix nanoseconds, 0: none

// SetIODeadline makes every module file operation fail once t has passed.
// The zero time clears it.
func SetIODeadline(t time.Time) {
	if t.IsZero() {
		ioDeadline.Store(0)
		return
	}
	ioDeadline.Store(t.UnixNano())
}

// ErrTimeout is returned by a file operation that did not finish in time.
var ErrTimeout = errors.New("file operation timed out (a FUSE or NFS mount that does not answer?)")

// bounded runs op with the timeout; op's results are dropped if it
// finishes late.
func bounded[T any](op func() (T, error)) (T, error) {
	wait := OpTimeout
	if d := ioDeadline.Load(); d != 0 {
		if left := time.Until(time.Unix(0, d)); left < wait {
			wait = left
		}
	}
	var zero T
	if wait <= 0 {
		return zero, ErrTimeout
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := op()
		ch <- result{v, err}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-t.C:
		return zero, ErrTimeout
	}
}

// boundedFile is a module file whose reads are bounded in time.
type boundedFile struct {
	f      *os.File
	size   int64 // at open time
	hung   atomic.Bool
	closed sync.Once
}

func (b *boundedFile) ReadAt(p []byte, off int64) (int, error) {
	if b.hung.Load() {
		return 0, ErrTimeout
	}
	// Each read goes into a private buffer (a late read must not write
	// into p after we returned), 64 KiB at a time: a whole section read
	// at once would briefly need twice its size.
	done := 0
	for done < len(p) {
		n := min(len(p)-done, 64<<10)
		at := off + int64(done)
		// Every op returns a pointer: one instantiation of bounded.
		q, err := bounded(func() (*[]byte, error) {
			q := make([]byte, n)
			k, err := b.f.ReadAt(q, at)
			q = q[:k]
			return &q, err
		})
		if err == ErrTimeout {
			b.hung.Store(true)
			return done, fmt.Errorf("%s: %w", b.f.Name(), err)
		}
		buf := *q
		done += copy(p[done:], buf)
		if err != nil {
			return done, err
		}
		if len(buf) < n {
			return done, io.EOF
		}
	}
	return done, nil
}

// Size is the file's size when it was opened (module.Load checks the
// headers against it).
func (b *boundedFile) Size() int64 { return b.size }

func (b *boundedFile) Close() error {
	if b.hung.Load() {
		// close(2) on a hung FUSE file may block too.
		go b.closed.Do(func() { b.f.Close() })
		return nil
	}
	b.closed.Do(func() { b.f.Close() })
	return nil
}

// openFile opens p (a path the handler chose, or a /proc magic link) for
// reading, with a timeout; only regular files are accepted.
func openFile(p string) (io.ReaderAt, io.Closer, error) {
	f, err := bounded(func() (*os.File, error) { return regular.Open(p) })
	if err == ErrTimeout {
		err = &os.PathError{Op: "open", Path: p, Err: err}
	}
	if err != nil {
		return nil, nil, err
	}
	return sized(f)
}

// sized wraps a regular file in a boundedFile.
func sized(f *os.File) (io.ReaderAt, io.Closer, error) {
	size, err := bounded(func() (*int64, error) {
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		n := st.Size()
		return &n, nil
	})
	if err != nil {
		go f.Close()
		return nil, nil, err
	}
	b := &boundedFile{f: f, size: *size}
	return b, b, nil
}

// openInRoot opens path (absolute or not) as seen from root: symlinks,
// absolute ones included, and ".." resolve inside root, never above it.
func openInRoot(root, path string) (io.ReaderAt, io.Closer, error) {
	name := root + "/" + strings.TrimLeft(path, "/")
	f, err := bounded(func() (*os.File, error) {
		rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: root, Err: err}
		}
		defer unix.Close(rfd)
		fd, err := resolveInRoot(rfd, path)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return regular.Check(os.NewFile(uintptr(fd), name))
	})
	if err == ErrTimeout {
		err = &os.PathError{Op: "open", Path: name, Err: err}
	}
	if err != nil {
		return nil, nil, err
	}
	return sized(f)
}

// useOpenat2 is cleared when the kernel lacks openat2 (and by tests, to
// exercise the fallback).
var useOpenat2 = true

func resolveInRoot(rfd int, path string) (int, error) {
	const flags = regular.Flags
	if useOpenat2 {
		fd, err := unix.Openat2(rfd, strings.TrimLeft(path, "/"), &unix.OpenHow{
			Flags:   flags,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != unix.ENOSYS && err != unix.EPERM {
			return fd, err
		}
		// ENOSYS: before Linux 5.6; EPERM: a seccomp filter.
	}
	return walkInRoot(rfd, path, flags)
}

// walkInRoot resolves path under rfd one component at a time (the
// fallback for kernels without openat2), holding a descriptor of every
// directory on the way, so a directory swapped for a symlink meanwhile is
// never followed.
func walkInRoot(rfd int, path string, flags int) (int, error) {
	dirs := []int{rfd} // dirs[0] is the caller's
	defer func() {
		for _, d := range dirs[1:] {
			unix.Close(d)
		}
	}()
	parts := strings.Split(path, "/")
	links := 0
	for len(parts) > 0 {
		comp := parts[0]
		parts = parts[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			if len(dirs) > 1 {
				unix.Close(dirs[len(dirs)-1])
				dirs = dirs[:len(dirs)-1]
			}
			continue
		}
		cur := dirs[len(dirs)-1]
		fd, err := unix.Openat(cur, comp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			links++
			buf := make([]byte, 4096)
			n, err := unix.Readlinkat(fd, "", buf)
			unix.Close(fd)
			if err != nil {
				return -1, err
			}
			if links > 40 {
				return -1, unix.ELOOP
			}
			target := string(buf[:n])
			if strings.HasPrefix(target, "/") {
				for _, d := range dirs[1:] {
					unix.Close(d)
				}
				dirs = dirs[:1]
			}
			parts = append(strings.Split(target, "/"), parts...)
		case unix.S_IFDIR:
			dirs = append(dirs, fd)
		default:
			if strings.Join(parts, "") != "" {
				unix.Close(fd)
				return -1, unix.ENOTDIR
			}
			// The O_PATH descriptor is reopened for reading through its
			// /proc/self/fd link, which names this very inode.
			rd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), flags, 0)
			unix.Close(fd)
			return rd, err
		}
	}
	return -1, unix.EISDIR
}
