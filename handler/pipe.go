package handler

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// teeCore, with handler.save_core_dir set, tees the core stream into a
// file there: the process is then held until the whole core is written
// (saveCore), and nothing is spliced past the tee.
func (c *crash) teeCore() {
	dir := c.env.cfg.Handler.SaveCoreDir
	if dir == "" || c.in.stream == nil || !c.in.held {
		return
	}
	name := filepath.Join(dir, fmt.Sprintf("core.%d.%d", c.proc.pid, c.proc.time))
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		c.errorf("save_core_dir: %v", err)
		return
	}
	c.env.log.Infof("saving the full core to %s (handler.save_core_dir)", name)
	c.in.stream, c.in.skip, c.saved = io.TeeReader(c.in.stream, out), nil, out
}

// pipeReader returns the pipe f as a descriptor whose reads honour
// deadline: the one to read from, and to close when the core is no
// longer needed.
func pipeReader(f *os.File, deadline time.Time) *os.File {
	// A duplicate descriptor in non-blocking mode goes through Go's poller,
	// so reads honour the deadline; the original is closed, the pipe stays
	// open through the duplicate until release.
	// F_DUPFD_CLOEXEC: a child started meanwhile by another crash of the
	// same process (the coredump socket server) must not inherit it.
	if fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0); err == nil {
		if unix.SetNonblock(fd, true) == nil {
			nf := os.NewFile(uintptr(fd), "stdin")
			if nf.SetReadDeadline(deadline) == nil {
				f.Close()
				return nf
			}
			nf.Close()
		} else {
			unix.Close(fd)
		}
	}
	return f
}

// coreReader is the core: the bytes a supervising parent already read
// (prefix, nil once drained), then the pipe.
type coreReader struct {
	prefix io.Reader
	pipe   *os.File
	null   int  // /dev/null, opened on the first skip; -1: unusable
	grown  bool // the pipe's buffer was enlarged
	// nosplice: the core comes through a socket, which cannot be spliced
	// into /dev/null.
	nosplice bool
}

func (r *coreReader) Read(p []byte) (int, error) {
	if r.prefix != nil {
		n, err := r.prefix.Read(p)
		if err != io.EOF {
			return n, err
		}
		r.prefix = nil
		if n > 0 {
			return n, nil
		}
	}
	return r.pipe.Read(p)
}

// skip discards n bytes of the core. From the pipe it splices them into
// /dev/null: no copy through the handler's memory, one system call per
// pipe buffer (a 1 GiB process streams 1 GiB: with 8 KiB reads into a
// buffer that was 131,072 reads and copies). The pipe is grown to 1 MiB
// (kernel memory, freed as it drains) so each splice moves more.
func (r *coreReader) skip(n int64) (int64, error) {
	if r.null == 0 {
		r.null = -1
		if fd, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			r.null = fd
		}
	}
	rc, err := r.pipe.SyscallConn()
	if r.prefix != nil || r.null < 0 || err != nil {
		return io.CopyN(io.Discard, r, n)
	}
	if !r.grown {
		r.grown = true
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
	var done int64
	var serr error
	if r.nosplice {
		return io.CopyN(io.Discard, r, n)
	}
	for done < n && serr == nil {
		err := rc.Read(func(fd uintptr) bool {
			m, e := unix.Splice(int(fd), nil, r.null, nil, int(min(n-done, 1<<20)), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case e == unix.EAGAIN:
				return false // wait for the kernel to write more
			case e == unix.EINVAL && done == 0:
				// A socket (the coredump socket server): splice needs a
				// pipe on one side.
				r.nosplice = true
			case e != nil:
				serr = e
			case m == 0:
				serr = io.EOF
			default:
				done += int64(m) // int on 32-bit ARM
			}
			return true
		})
		if err != nil && serr == nil {
			serr = err // the read deadline
		}
		if r.nosplice {
			return io.CopyN(io.Discard, r, n)
		}
	}
	return done, serr
}

// saveCore drains the rest of the core through the tee into the file,
// then lets the process go.
func (c *crash) saveCore() {
	out := c.saved
	c.saved = nil
	if f, ok := c.in.closer.(*os.File); ok {
		f.SetReadDeadline(time.Now().Add(60 * time.Second))
	}
	if _, err := io.Copy(io.Discard, c.in.stream); err != nil {
		c.errorf("save_core_dir: %v", err)
	}
	if err := out.Sync(); err != nil {
		c.errorf("save_core_dir: %v", err)
	}
	out.Close()
	c.release()
}
