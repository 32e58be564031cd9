package handler

import (
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
	// missed is set when a read after the release fell outside the
	// snapshot: a walk that ends then ends where the snapshot does.
	missed atomic.Bool
	cache  *pageCache
}

func (m *snapMem) ReadAt(p []byte, off int64) (int, error) {
	n, err := m.snap.ReadAt(p, off)
	if err == nil || m.live == nil {
		return n, err
	}
	if m.released.Load() {
		m.missed.Store(true)
		return n, err
	}
	return m.readLive(p, off)
}

// readLive reads /proc/<pid>/mem through the page cache.
func (m *snapMem) readLive(p []byte, off int64) (int, error) {
	if m.cache == nil {
		m.cache = newPageCache(m.live)
	}
	return m.cache.ReadAt(p, off)
}

const (
	cachePage  = 4096
	cachePages = 256 // 1 MiB
)

// pageCache reads through whole pages, kept: a walk up a deep stack reads
// each page once with one pread instead of one pread per word.
//
// Pages that do not read whole are remembered too: a stack scan tests
// thousands of words that point nowhere, and each would cost a failed
// pread and a page of garbage.
type pageCache struct {
	r     io.ReaderAt
	pages map[int64][]byte
	short map[int64]bool // pages that did not read whole
	spare []byte         // a page buffer a failed read left unused
}

func newPageCache(r io.ReaderAt) *pageCache {
	return &pageCache{r: r, pages: map[int64][]byte{}, short: map[int64]bool{}}
}

func (c *pageCache) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		addr := off + int64(done)
		base := addr &^ (cachePage - 1)
		pg, ok := c.pages[base]
		if !ok && !c.short[base] {
			buf := c.spare
			if buf == nil {
				buf = make([]byte, cachePage)
			}
			c.spare = nil
			if n, _ := c.r.ReadAt(buf, base); n == cachePage {
				if len(c.pages) >= cachePages {
					clear(c.pages)
				}
				pg, ok = buf, true
				c.pages[base] = pg
			} else {
				c.spare = buf
				if len(c.short) >= cachePages {
					clear(c.short)
				}
				c.short[base] = true
			}
		}
		if !ok {
			// Not a whole readable page (a kept window's edge, or nothing
			// there): read exactly what was asked.
			n, err := c.r.ReadAt(p[done:], addr)
			return done + n, err
		}
		done += copy(p[done:], pg[addr-base:])
	}
	return done, nil
}

// offsetReader reads an in-memory ELF image (the vDSO) at base as a file.
type offsetReader struct {
	r    io.ReaderAt
	base uint64
	size int64
}

// Size is the length of the window.
func (o offsetReader) Size() int64 { return o.size }

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
