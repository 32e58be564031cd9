package handler

import (
	"errors"
	"io"
	"sync/atomic"

	"github.com/unwound-dev/unwound/handler/coredump"
)

// snapMem reads a process's memory from a snapshot taken while the process
// was frozen (each thread's stack window, the vDSO), and, until released,
// from /proc/<pid>/mem for everything else: a deep recursion is walked to
// its end while the process is held, and from the snapshot after.
type snapMem struct {
	snap     *coredump.Memory
	live     io.ReaderAt // nil when there is no live source
	released atomic.Bool
}

func (m *snapMem) ReadAt(p []byte, off int64) (int, error) {
	n, err := m.snap.ReadAt(p, off)
	if err == nil || m.live == nil || m.released.Load() {
		return n, err
	}
	n, err = m.live.ReadAt(p, off)
	if n == len(p) {
		return n, nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// offsetReader reads an in-memory ELF image (the vDSO) at base as a file.
type offsetReader struct {
	r    io.ReaderAt
	base uint64
	size int64
}

func (o offsetReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= o.size {
		return 0, io.EOF
	}
	if rem := o.size - off; int64(len(p)) > rem {
		n, err := o.r.ReadAt(p[:rem], int64(o.base)+off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	return o.r.ReadAt(p, int64(o.base)+off)
}

var errNoLive = errors.New("no live memory source")
