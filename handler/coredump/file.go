package coredump

import (
	"fmt"
	"io"
	"sort"
)

// OpenFile reads a core from a file (offline mode): the headers and notes
// as from a stream, and a Memory-like reader over every PT_LOAD.
func OpenFile(r io.ReaderAt, size int64, lim Limits) (*Core, *FileMemory, error) {
	c, _, err := ReadHeader(io.NewSectionReader(r, 0, size), lim)
	if c == nil {
		return nil, nil, err
	}
	fm := &FileMemory{r: r, size: size}
	for _, s := range c.Segments {
		if s.Filesz > 0 && s.Offset < uint64(size) {
			fm.segs = append(fm.segs, s)
		}
		if err == nil && s.Filesz > 0 && (s.Offset > uint64(size) || s.Filesz > uint64(size)-s.Offset) {
			// A core cut short (RLIMIT_CORE, a full disk), or a lie.
			err = &FormatError{int64(s.Offset), fmt.Sprintf("core truncated: PT_LOAD %#x needs %#x bytes at %#x, the file has %#x", s.Vaddr, s.Filesz, s.Offset, size)}
		}
	}
	sort.Slice(fm.segs, func(i, j int) bool { return fm.segs[i].Vaddr < fm.segs[j].Vaddr })
	return c, fm, err
}

// FileMemory reads a core file's segments by virtual address.
type FileMemory struct {
	r    io.ReaderAt
	size int64
	segs []Segment
}

// ReadAt reads len(p) bytes at virtual address off.
func (m *FileMemory) ReadAt(p []byte, off int64) (int, error) {
	addr := uint64(off)
	i := sort.Search(len(m.segs), func(i int) bool { return m.segs[i].Vaddr > addr }) - 1
	if i < 0 {
		return 0, ErrNotCaptured
	}
	s := m.segs[i]
	if addr-s.Vaddr >= s.Filesz || uint64(len(p)) > s.Filesz-(addr-s.Vaddr) {
		return 0, ErrNotCaptured
	}
	return m.r.ReadAt(p, int64(s.Offset+(addr-s.Vaddr)))
}
