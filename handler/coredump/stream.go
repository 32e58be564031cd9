package coredump

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/unwound-dev/unwound/elf"
)

// ReadHeader reads a core's ELF header, program headers and notes from a
// stream and returns the stream positioned just after the notes.
func ReadHeader(r io.Reader, lim Limits) (*Core, *Stream, error) {
	s := &Stream{r: r}
	ident := make([]byte, 64)
	if err := s.readFull(ident[:16]); err != nil {
		return nil, nil, err
	}
	h, err := parseIdent(ident)
	if err != nil {
		return nil, nil, err
	}
	if err := s.readFull(ident[16:h.ehsize()]); err != nil {
		return nil, nil, err
	}
	if err := h.parse(ident); err != nil {
		return nil, nil, err
	}
	c := &Core{Class: h.class, Machine: h.machine, Order: h.order}
	if h.phoff < uint64(h.ehsize()) {
		return nil, nil, &FormatError{0, fmt.Sprintf("program headers at %#x overlap the ELF header", h.phoff)}
	}
	if h.phnum > uint64(lim.MaxSegments) {
		return nil, nil, &FormatError{0, fmt.Sprintf("%d program headers, limit %d", h.phnum, lim.MaxSegments)}
	}
	if err := s.skipTo(int64(h.phoff)); err != nil {
		return nil, nil, err
	}
	ph := make([]byte, h.phentsz)
	var notes []prog
	var noteBytes uint64
	for i := uint64(0); i < h.phnum; i++ {
		if err := s.readFull(ph); err != nil {
			return nil, nil, err
		}
		p := h.parseProg(ph)
		if i == 0 && h.phnum == pnXNum {
			// More than 0xfffe segments: the real count is in section
			// header 0, which the kernel writes at the very end of the
			// core (fs/binfmt_elf.c, e_shoff after the segment data). A
			// stream cannot wait for it; the note data starts right after
			// the last program header, so the first one (PT_NOTE) tells.
			if p.typ != elf.PT_NOTE || p.off < h.phoff || (p.off-h.phoff)%h.phentsz != 0 {
				return nil, nil, &FormatError{s.off, "e_phnum is PN_XNUM and the program header count cannot be derived"}
			}
			h.phnum = (p.off - h.phoff) / h.phentsz
			if h.phnum > uint64(lim.MaxSegments) {
				return nil, nil, &FormatError{0, fmt.Sprintf("%d program headers, limit %d", h.phnum, lim.MaxSegments)}
			}
		}
		switch p.typ {
		case elf.PT_NOTE:
			if lim.MaxNoteBytes < 0 || p.filesz > uint64(lim.MaxNoteBytes)-noteBytes {
				return nil, nil, &FormatError{s.off, fmt.Sprintf("notes of more than %d bytes, limit %d", noteBytes, lim.MaxNoteBytes)}
			}
			noteBytes += p.filesz
			notes = append(notes, p)
		case elf.PT_LOAD:
			c.Segments = append(c.Segments, Segment{Vaddr: p.vaddr, Memsz: p.memsz, Offset: p.off, Filesz: p.filesz, Flags: p.flags})
		}
	}
	sort.SliceStable(notes, func(i, j int) bool { return notes[i].off < notes[j].off })
	for _, n := range notes {
		if int64(n.off) < s.off {
			return nil, nil, &FormatError{int64(n.off), "PT_NOTE overlaps earlier data"}
		}
		if err := s.skipTo(int64(n.off)); err != nil {
			return nil, nil, err
		}
		b, err := s.readGrowing(n.filesz)
		if err != nil {
			return nil, nil, err
		}
		if err := c.parseNotes(b, int64(n.off), lim); err != nil {
			return c, s, err
		}
	}
	if len(c.Threads) == 0 {
		return c, s, &FormatError{s.off, "no NT_PRSTATUS note"}
	}
	sort.SliceStable(c.Segments, func(i, j int) bool { return c.Segments[i].Offset < c.Segments[j].Offset })
	// What segment data must not overlap: the ELF and program headers and
	// every note. The kernel writes notes first; gdb's gcore writes them
	// after the segment data.
	taken := [][2]uint64{{0, h.phoff + h.phnum*h.phentsz}}
	for _, n := range notes {
		taken = append(taken, [2]uint64{n.off, n.off + n.filesz})
	}
	return c, s, checkSegments(c.Segments, taken)
}

// checkSegments finds the lies the kernel never tells: segment data inside
// the headers or notes, segments whose data or addresses overlap. segs are
// in file order. Such a core is still read (what it holds may be right),
// but the report says it is suspect.
func checkSegments(segs []Segment, taken [][2]uint64) error {
	var prevEnd uint64
	for i, sg := range segs {
		if sg.Filesz == 0 {
			continue
		}
		for _, t := range taken {
			if sg.Offset < t[1] && sg.Offset+sg.Filesz > t[0] {
				return &FormatError{int64(sg.Offset), fmt.Sprintf("PT_LOAD %#x data lies inside the headers or notes", sg.Vaddr)}
			}
		}
		if i > 0 && sg.Offset < prevEnd {
			return &FormatError{int64(sg.Offset), fmt.Sprintf("PT_LOAD %#x data overlaps the previous segment's", sg.Vaddr)}
		}
		if end := sg.Offset + sg.Filesz; end > prevEnd {
			prevEnd = end
		}
		if sg.Filesz > sg.Memsz || sg.Vaddr+sg.Memsz < sg.Vaddr {
			return &FormatError{int64(sg.Offset), fmt.Sprintf("PT_LOAD %#x: p_filesz %#x, p_memsz %#x", sg.Vaddr, sg.Filesz, sg.Memsz)}
		}
	}
	// Address overlaps: sort a copy by address (the kernel may sort the
	// segments by size, kernel.core_sort_vma).
	byAddr := slices.Clone(segs)
	sort.Slice(byAddr, func(i, j int) bool { return byAddr[i].Vaddr < byAddr[j].Vaddr })
	for i := 1; i < len(byAddr); i++ {
		if a, b := byAddr[i-1], byAddr[i]; a.Memsz > 0 && b.Vaddr < a.Vaddr+a.Memsz {
			return &FormatError{int64(b.Offset), fmt.Sprintf("PT_LOAD %#x overlaps PT_LOAD %#x in memory", b.Vaddr, a.Vaddr)}
		}
	}
	return nil
}

// Stream is the forward-only rest of a core after its notes.
type Stream struct {
	r   io.Reader
	off int64
	// Deadline, when set, stops Collect between chunks.
	Deadline time.Time
	// Skip discards n bytes; nil means io.CopyN into io.Discard. The
	// handler sets a splice(2)-based one for pipes.
	Skip func(r io.Reader, n int64) (int64, error)
}

const pnXNum = 0xffff

// ErrDeadline is returned when the stream's deadline passed.
var ErrDeadline = errors.New("core stream: deadline exceeded")

// Offset is how many bytes of the core have been consumed.
func (s *Stream) Offset() int64 { return s.off }

func (s *Stream) readFull(b []byte) error {
	n, err := io.ReadFull(s.r, b)
	s.off += int64(n)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return &FormatError{s.off, "core truncated"}
		}
		return fmt.Errorf("core: reading at %#x: %w", s.off, err)
	}
	return nil
}

// readGrowing reads n bytes, allocating as they arrive rather than all
// at once, so that a header claiming more than the stream holds costs no
// more memory than the stream's length.
func (s *Stream) readGrowing(n uint64) ([]byte, error) {
	const step = 64 << 10
	var b []byte
	for uint64(len(b)) < n {
		k := n - uint64(len(b))
		if lim := uint64(max(len(b), step)); k > lim {
			k = lim
		}
		b = slices.Grow(b, int(k))
		if err := s.readFull(b[len(b) : len(b)+int(k)]); err != nil {
			return nil, err
		}
		b = b[:len(b)+int(k)]
	}
	return b, nil
}

func (s *Stream) skipTo(off int64) error {
	if off < s.off {
		return &FormatError{off, fmt.Sprintf("data at %#x lies behind the stream position %#x", off, s.off)}
	}
	for off > s.off {
		if !s.Deadline.IsZero() && time.Now().After(s.Deadline) {
			return ErrDeadline
		}
		chunk := off - s.off
		if chunk > 1<<20 {
			chunk = 1 << 20
		}
		var n int64
		var err error
		if s.Skip != nil {
			n, err = s.Skip(s.r, chunk)
		} else {
			n, err = io.CopyN(io.Discard, s.r, chunk)
		}
		s.off += n
		if err != nil {
			if err == io.EOF {
				return &FormatError{s.off, "core truncated"}
			}
			return err
		}
	}
	return nil
}

// Range is a half-open range of virtual addresses.
type Range struct{ Lo, Hi uint64 }

// Collect walks the remaining segment data once, in file order. For each
// segment, want returns the address ranges to keep; everything else is
// discarded. It returns what was kept, and an error if the stream ended or
// the deadline passed early (the Memory then holds what was read so far).
func (s *Stream) Collect(segs []Segment, want func(Segment) []Range, maxBytes int64) (*Memory, error) {
	m := &Memory{}
	var kept int64
	for _, seg := range segs {
		if seg.Filesz == 0 {
			continue
		}
		for _, r := range want(seg) {
			lo, hi := r.Lo, r.Hi
			end := seg.Vaddr + seg.Filesz
			if end < seg.Vaddr {
				end = ^uint64(0) // a lying p_filesz: clipped by the stream
			}
			if lo < seg.Vaddr {
				lo = seg.Vaddr
			}
			if hi > end {
				hi = end
			}
			if hi <= lo {
				continue // empty, or not in this segment
			}
			off := int64(seg.Offset + (lo - seg.Vaddr))
			if off < s.off {
				continue // overlapping ranges or segments: already passed
			}
			if kept > maxBytes || hi-lo > uint64(maxBytes-kept) {
				return m, fmt.Errorf("core: kept memory over its %d-byte budget", maxBytes)
			}
			if err := s.skipTo(off); err != nil {
				return m, err
			}
			b := make([]byte, hi-lo)
			if err := s.readFull(b); err != nil {
				return m, err
			}
			kept += int64(len(b))
			m.Add(lo, b)
		}
	}
	return m, nil
}

// Memory is a sparse copy of a process's memory, addressed by virtual
// address. It implements io.ReaderAt; a read not wholly inside one kept
// range fails.
type Memory struct {
	ranges []memRange // sorted by addr, non-overlapping
}

type memRange struct {
	addr uint64
	data []byte
}

// ErrNotCaptured is returned for addresses outside the kept ranges.
var ErrNotCaptured = errors.New("memory not captured")

// Add keeps data at addr. Ranges overlapping an existing one are dropped.
func (m *Memory) Add(addr uint64, data []byte) {
	i := sort.Search(len(m.ranges), func(i int) bool { return m.ranges[i].addr >= addr })
	if i > 0 && m.ranges[i-1].addr+uint64(len(m.ranges[i-1].data)) > addr {
		return
	}
	if i < len(m.ranges) && addr+uint64(len(data)) > m.ranges[i].addr {
		return
	}
	m.ranges = append(m.ranges, memRange{})
	copy(m.ranges[i+1:], m.ranges[i:])
	m.ranges[i] = memRange{addr, data}
}

// Size is the number of bytes kept.
func (m *Memory) Size() int64 {
	var n int64
	for _, r := range m.ranges {
		n += int64(len(r.data))
	}
	return n
}

// ReadAt reads len(p) bytes at virtual address off.
func (m *Memory) ReadAt(p []byte, off int64) (int, error) {
	addr := uint64(off)
	i := sort.Search(len(m.ranges), func(i int) bool { return m.ranges[i].addr > addr }) - 1
	if i < 0 {
		return 0, ErrNotCaptured
	}
	r := m.ranges[i]
	if addr-r.addr >= uint64(len(r.data)) || uint64(len(p)) > uint64(len(r.data))-(addr-r.addr) {
		return 0, ErrNotCaptured
	}
	return copy(p, r.data[addr-r.addr:]), nil
}
