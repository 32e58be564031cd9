package coredump

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

var sampleArches = []struct {
	name    string
	class   elf.Class
	machine elf.Machine
	order   binary.ByteOrder
}{
	{"x86_64", elf.ELFCLASS64, elf.EM_X86_64, nil},
	{"aarch64", elf.ELFCLASS64, elf.EM_AARCH64, nil},
	{"riscv64", elf.ELFCLASS64, elf.EM_RISCV, nil},
	{"arm", elf.ELFCLASS32, elf.EM_ARM, nil},
	{"i386", elf.ELFCLASS32, elf.EM_386, nil},
	{"arm-be", elf.ELFCLASS32, elf.EM_ARM, binary.BigEndian},
}

func sample(i int) *synthCore {
	a := sampleArches[i]
	return sampleCoreOrder(a.class, a.machine, a.order)
}

func mustRead(t testing.TB, b []byte) (*Core, *Stream) {
	t.Helper()
	c, s, err := ReadHeader(bytes.NewReader(b), DefaultLimits)
	if err != nil {
		t.Fatalf("ReadHeader: %v", err)
	}
	return c, s
}

func TestNotes(t *testing.T) {
	for i, a := range sampleArches {
		t.Run(a.name, func(t *testing.T) {
			sc := sample(i)
			b := sc.bytes()
			c, _ := mustRead(t, b)
			if c.Class != a.class || c.Machine != a.machine {
				t.Errorf("class %v machine %v", c.Class, c.Machine)
			}
			if len(c.Threads) != 3 {
				t.Fatalf("%d threads, want 3", len(c.Threads))
			}
			for j, want := range []struct {
				tid, sig int
				base     uint64
			}{{101, 11, 0x1000}, {102, 0, 0x2000}, {103, 0, 0x3000}} {
				th := c.Threads[j]
				if th.TID != want.tid || th.Signal != want.sig {
					t.Errorf("thread %d: tid %d sig %d, want %d %d", j, th.TID, th.Signal, want.tid, want.sig)
				}
				if !reflect.DeepEqual(th.Regs, regsFor(a.machine, want.base)) {
					t.Errorf("thread %d regs %x", j, th.Regs)
				}
			}
			wantPAC := uint64(0)
			if a.machine == elf.EM_AARCH64 {
				wantPAC = 0x007f800000000000
			}
			if c.Threads[0].PACMask != wantPAC || c.Threads[1].PACMask != 0 {
				t.Errorf("PAC masks %#x %#x", c.Threads[0].PACMask, c.Threads[1].PACMask)
			}
			wantPI := &PRPSInfo{PID: 101, PPID: 1, UID: 1000, GID: 1001, Fname: "crasher", Args: "./crasher -x arg"}
			if !reflect.DeepEqual(c.PRPSInfo, wantPI) {
				t.Errorf("prpsinfo %+v", c.PRPSInfo)
			}
			if want := (&SigInfo{Signo: 11, Code: 1, Addr: 0xdead0}); !reflect.DeepEqual(c.SigInfo, want) {
				t.Errorf("siginfo %+v", c.SigInfo)
			}
			if want := []AuxEntry{{6, 4096}, {AT_SYSINFO_EHDR, 0x7fff0000}, {9, 0x401000}}; !reflect.DeepEqual(c.Auxv, want) {
				t.Errorf("auxv %v", c.Auxv)
			}
			if v, ok := c.AuxvValue(AT_SYSINFO_EHDR); !ok || v != 0x7fff0000 {
				t.Errorf("AT_SYSINFO_EHDR %#x %v", v, ok)
			}
			if _, ok := c.AuxvValue(12345); ok {
				t.Errorf("absent tag found")
			}
			wantF := []FileMapping{
				{Start: 0x400000, End: 0x401000, Offset: 0, Path: "/usr/bin/crasher"},
				{Start: 0x401000, End: 0x403000, Offset: 0x1000, Path: "/usr/bin/crasher"},
				{Start: 0x70000000, End: 0x70001000, Offset: 0x3000, Path: "/tmp/libgone.so (deleted)"},
			}
			if !reflect.DeepEqual(c.Files, wantF) {
				t.Errorf("files %+v", c.Files)
			}
			if c.Skipped != 3 {
				t.Errorf("skipped %d, want 3", c.Skipped)
			}
			if len(c.Segments) != 4 {
				t.Fatalf("%d segments", len(c.Segments))
			}
			for j, s := range c.Segments {
				w := sc.segs[j]
				memsz := w.memsz
				if memsz == 0 {
					memsz = w.size
				}
				if s.Vaddr != w.vaddr || s.Filesz != w.size || s.Memsz != memsz || s.Offset != w.offset || s.Flags != w.flags {
					t.Errorf("segment %d: %+v, want %+v", j, s, w)
				}
			}

			// OpenFile sees the same core and reads memory by address.
			fc, fm, err := OpenFile(bytes.NewReader(b), int64(len(b)), DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fc, c) {
				t.Errorf("OpenFile core differs")
			}
			p := make([]byte, 0x20)
			if _, err := fm.ReadAt(p, 0x401ff0); err != nil {
				t.Fatal(err)
			}
			checkFill(t, p, 0x401ff0)
			if _, err := fm.ReadAt(p, 0x502ff0); err != ErrNotCaptured {
				t.Errorf("read past a segment's end: %v", err)
			}
			if _, err := fm.ReadAt(p, 0x600000); err != ErrNotCaptured {
				t.Errorf("read of a memsz-only segment: %v", err)
			}
			if _, err := fm.ReadAt(p, 0x1000); err != ErrNotCaptured {
				t.Errorf("read below all segments: %v", err)
			}
		})
	}
}

func checkFill(t testing.TB, p []byte, addr uint64) {
	t.Helper()
	for i, v := range p {
		if v != fill(addr+uint64(i)) {
			t.Fatalf("byte at %#x is %#x, want %#x", addr+uint64(i), v, fill(addr+uint64(i)))
		}
	}
}

func TestCollect(t *testing.T) {
	for i, a := range sampleArches {
		t.Run(a.name, func(t *testing.T) {
			b := sample(i).bytes()
			c, s := mustRead(t, b)
			want := map[uint64][]Range{
				0x70000000: {{0x70000100, 0x70000200}},
				// Clipped at the start, two windows, one past the end.
				0x400000: {{0x300000, 0x400010}, {0x400ff0, 0x401010}, {0x402000, 0x402100}, {0x402ff0, 0x404000}},
				0x600000: {{0x600000, 0x601000}},
				// Below and above the segment: nothing.
				0x500000: {{0x100, 0x200}, {0x501000, 0x501001}, {0x900000, 0x900100}},
			}
			var asked []uint64
			m, err := s.Collect(c.Segments, func(sg Segment) []Range {
				asked = append(asked, sg.Vaddr)
				return want[sg.Vaddr]
			}, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			// Segments come in file order, not address order.
			if !reflect.DeepEqual(asked, []uint64{0x70000000, 0x400000, 0x500000}) {
				t.Errorf("asked for %x", asked)
			}
			kept := []Range{{0x400000, 0x400010}, {0x400ff0, 0x401010}, {0x402000, 0x402100}, {0x402ff0, 0x403000}, {0x501000, 0x501001}, {0x70000100, 0x70000200}}
			var total int64
			for _, r := range kept {
				p := make([]byte, r.Hi-r.Lo)
				if _, err := m.ReadAt(p, int64(r.Lo)); err != nil {
					t.Fatalf("%#x: %v", r.Lo, err)
				}
				checkFill(t, p, r.Lo)
				total += int64(r.Hi - r.Lo)
			}
			if m.Size() != total {
				t.Errorf("kept %d bytes, want %d", m.Size(), total)
			}
			for _, addr := range []uint64{0x400010, 0x3fffff, 0x401010, 0x501001, 0x70000000, 0x600000} {
				if _, err := m.ReadAt(make([]byte, 1), int64(addr)); err != ErrNotCaptured {
					t.Errorf("%#x: %v, want ErrNotCaptured", addr, err)
				}
			}
			if _, err := m.ReadAt(make([]byte, 0x21), 0x401000); err != ErrNotCaptured {
				t.Errorf("read across a kept range's end: %v", err)
			}
			if s.Offset() >= int64(len(b)) {
				t.Errorf("stream read to %d of %d: the tail should not be needed", s.Offset(), len(b))
			}

			// Over budget.
			_, s = mustRead(t, b)
			if _, err := s.Collect(c.Segments, func(Segment) []Range { return []Range{{0, ^uint64(0)}} }, 0x1800); err == nil || !strings.Contains(err.Error(), "budget") {
				t.Errorf("over budget: %v", err)
			}
		})
	}
}

// Ranges asked for out of order, and overlapping segments, are skipped
// rather than rewinding the stream.
func TestCollectOverlap(t *testing.T) {
	sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	b := sc.bytes()
	c, s := mustRead(t, b)
	// A second PT_LOAD over the same file bytes as the first one.
	segs := append([]Segment{}, c.Segments...)
	dup := segs[0]
	dup.Vaddr = 0x900000
	segs = append(segs[:1], append([]Segment{dup}, segs[1:]...)...)
	m, err := s.Collect(segs, func(sg Segment) []Range {
		if sg.Vaddr == 0x400000 {
			return []Range{{0x402000, 0x402010}, {0x401000, 0x401010}} // backwards
		}
		return []Range{{sg.Vaddr, sg.Vaddr + 16}}
	}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 16)
	if _, err := m.ReadAt(p, 0x900000); err != ErrNotCaptured {
		t.Errorf("overlapping segment was kept: %v", err)
	}
	if _, err := m.ReadAt(p, 0x401000); err != ErrNotCaptured {
		t.Errorf("backwards range was kept: %v", err)
	}
	for _, a := range []uint64{0x70000000, 0x402000, 0x500000} {
		if _, err := m.ReadAt(p, int64(a)); err != nil {
			t.Errorf("%#x: %v", a, err)
		}
		checkFill(t, p, a)
	}

	var mem Memory
	mem.Add(100, make([]byte, 10))
	mem.Add(105, make([]byte, 10)) // overlaps: dropped
	mem.Add(95, make([]byte, 10))  // overlaps: dropped
	mem.Add(90, make([]byte, 10))
	mem.Add(110, make([]byte, 1))
	if mem.Size() != 21 {
		t.Errorf("Memory kept %d bytes, want 21", mem.Size())
	}
}

func TestXNum(t *testing.T) {
	for _, class := range []elf.Class{elf.ELFCLASS64, elf.ELFCLASS32} {
		t.Run(class.String(), func(t *testing.T) {
			sc := sampleCore(class, elf.EM_ARM)
			if class == elf.ELFCLASS64 {
				sc = sampleCore(class, elf.EM_AARCH64)
			}
			// 0x10003 segments: e_phnum overflows.
			for i := 0; len(sc.segs) < 0x10001; i++ {
				sc.segs = append(sc.segs, synthSeg{vaddr: 0x10000000 + uint64(i)*0x2000, memsz: 0x1000, flags: elf.PF_R})
			}
			sc.segs = append(sc.segs, synthSeg{vaddr: 0x8000, size: 0x100, flags: elf.PF_R})
			b := sc.bytes()
			c, s := mustRead(t, b)
			if len(c.Segments) != 0x10002 {
				t.Fatalf("%d segments, want %d", len(c.Segments), 0x10002)
			}
			// The section header is at the end, after the segment data;
			// the stream must not need it.
			ehsize, _, shentsize := sc.sizes()
			shoff := binary.LittleEndian.Uint32(b[32:])
			if class == elf.ELFCLASS64 {
				shoff = uint32(binary.LittleEndian.Uint64(b[40:]))
			}
			_ = ehsize
			if int(shoff) != len(b)-shentsize {
				t.Errorf("e_shoff %#x, file %#x", shoff, len(b))
			}
			infoOff := 28
			if class == elf.ELFCLASS64 {
				infoOff = 44
			}
			if n := binary.LittleEndian.Uint32(b[int(shoff)+infoOff:]); n != 0x10003 {
				t.Errorf("sh_info %#x", n)
			}
			m, err := s.Collect(c.Segments, func(sg Segment) []Range { return []Range{{sg.Vaddr, sg.Vaddr + sg.Filesz}} }, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			p := make([]byte, 0x100)
			if _, err := m.ReadAt(p, 0x8000); err != nil {
				t.Fatal(err)
			}
			checkFill(t, p, 0x8000)
			if s.Offset() != int64(shoff) {
				t.Errorf("stream stopped at %#x, section header at %#x", s.Offset(), shoff)
			}
			// The same without the section header (a stream cut there).
			if _, _, err := ReadHeader(bytes.NewReader(b[:shoff]), DefaultLimits); err != nil {
				t.Error(err)
			}
		})
	}

	// PN_XNUM with few segments, and with zero padding between the
	// program headers and the notes: the padding reads as PT_NULL.
	for _, pad := range []int{0, 56 * 3} {
		sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
		sc.xnum, sc.notePad = true, pad
		c, _ := mustRead(t, sc.bytes())
		if len(c.Segments) != 4 || len(c.Threads) != 3 {
			t.Errorf("pad %d: %d segments %d threads", pad, len(c.Segments), len(c.Threads))
		}
	}
	// Padding that is not a whole number of program headers.
	sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	sc.xnum, sc.notePad = true, 8
	if _, _, err := ReadHeader(bytes.NewReader(sc.bytes()), DefaultLimits); err == nil {
		t.Error("PN_XNUM with an unaligned note offset: no error")
	}
	// Over the segment limit.
	sc = sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	sc.xnum, sc.notePad = true, 56*100
	lim := DefaultLimits
	lim.MaxSegments = 50
	if _, _, err := ReadHeader(bytes.NewReader(sc.bytes()), lim); err == nil {
		t.Error("PN_XNUM over MaxSegments: no error")
	}
}

// slowReader returns at most chunk bytes per Read, sleeping each time.
type slowReader struct {
	r     io.Reader
	chunk int
	delay time.Duration
}

func (r *slowReader) Read(p []byte) (int, error) {
	time.Sleep(r.delay)
	if len(p) > r.chunk {
		p = p[:r.chunk]
	}
	return r.r.Read(p)
}

func TestDeadline(t *testing.T) {
	sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	sc.segs = append(sc.segs, synthSeg{vaddr: 0x10000000, size: 64 << 20, zero: true}, synthSeg{vaddr: 0x20000000, size: 4096})
	c, s, err := ReadHeader(&slowReader{sc.reader(), 256 << 10, time.Millisecond}, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	s.Deadline = time.Now().Add(30 * time.Millisecond)
	start := time.Now()
	m, err := s.Collect(c.Segments, func(sg Segment) []Range {
		return []Range{{sg.Vaddr, sg.Vaddr + 16}}
	}, 1<<20)
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("err %v, want ErrDeadline", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("deadline honoured after %v", d)
	}
	// What was collected before the deadline is kept: the ranges before
	// the 64 MiB segment (all four on an idle machine, fewer under load),
	// never the one after it.
	if m == nil || m.Size() == 0 || m.Size()%16 != 0 || m.Size() > 16*4 {
		t.Errorf("partial memory %v", m)
	}

	// A custom Skip is used, and its errors are returned.
	_, s = mustRead(t, sc.bytes()[:8192])
	var skipped int64
	s.Skip = func(r io.Reader, n int64) (int64, error) {
		skipped += n
		return io.CopyN(io.Discard, r, n)
	}
	if _, err := s.Collect(c.Segments, func(sg Segment) []Range { return []Range{{sg.Vaddr + 0x10, sg.Vaddr + 0x20}} }, 1<<20); err == nil {
		t.Error("truncated stream: no error")
	}
	if skipped == 0 {
		t.Error("Skip not used")
	}
}

func TestLimits(t *testing.T) {
	// readWith reads the sample core's header under DefaultLimits as set
	// changes them.
	readWith := func(sc *synthCore, set func(*Limits)) (*Core, error) {
		lim := DefaultLimits
		set(&lim)
		c, _, err := ReadHeader(bytes.NewReader(sc.bytes()), lim)
		return c, err
	}
	t.Run("threads", func(t *testing.T) {
		sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
		for i := 0; i < 10; i++ {
			sc.addThread(200+i, 0, nil)
		}
		c, err := readWith(sc, func(l *Limits) { l.MaxThreads = 4 })
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Threads) != 4 || c.Threads[0].TID != 101 || c.Skipped != 3+9 {
			t.Errorf("%d threads, first %d, skipped %d", len(c.Threads), c.Threads[0].TID, c.Skipped)
		}
	})
	t.Run("files", func(t *testing.T) {
		c, err := readWith(sampleCore(elf.ELFCLASS64, elf.EM_X86_64), func(l *Limits) { l.MaxFiles = 2 })
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Files) != 2 || c.Files[0].Path != "/usr/bin/crasher" || c.Files[1].Path != "/usr/bin/crasher" {
			t.Errorf("files %+v", c.Files)
		}
	})
	for _, tc := range []struct {
		name, what string
		set        func(*Limits)
	}{
		{"segments", "5 program headers over a limit of 4", func(l *Limits) { l.MaxSegments = 4 }},
		{"notebytes", "notes over MaxNoteBytes", func(l *Limits) { l.MaxNoteBytes = 100 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := readWith(sampleCore(elf.ELFCLASS64, elf.EM_X86_64), tc.set); err == nil {
				t.Error(tc.what + ": no error")
			}
		})
	}
}

// patch returns a copy of b with a little-endian word written at off.
func patch(b []byte, off int, v uint64, size int) []byte {
	b = append([]byte(nil), b...)
	switch size {
	case 2:
		binary.LittleEndian.PutUint16(b[off:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[off:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[off:], v)
	}
	return b
}

// Hostile headers: errors, never panics, and memory bounded by what the
// stream holds rather than by what it claims.
func TestHostile(t *testing.T) {
	sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	good := sc.bytes()
	const ph0 = 64 // PT_NOTE program header
	const ph1 = 64 + 56
	noteOff := binary.LittleEndian.Uint64(good[ph0+8:])
	collectAll := func(c *Core, s *Stream) error {
		_, err := s.Collect(c.Segments, func(sg Segment) []Range { return []Range{{sg.Vaddr, sg.Vaddr + sg.Filesz}} }, 1<<30)
		return err
	}
	cases := []struct {
		name       string
		b          []byte
		lim        Limits
		headerErr  bool // ReadHeader must fail
		collectErr bool // Collect must fail
	}{
		{"note before phdrs", patch(good, ph0+8, 0x10, 8), DefaultLimits, true, false},
		{"note past the end", patch(good, ph0+8, 1<<40, 8), DefaultLimits, true, false},
		{"note offset negative", patch(good, ph0+8, 1<<63, 8), DefaultLimits, true, false},
		{"note larger than the stream", patch(good, ph0+32, 16<<20-1, 8), DefaultLimits, true, false},
		{"note size wraps the budget", patch(patch(good, ph0+32, ^uint64(0)-2, 8), ph1, uint64(elf.PT_NOTE), 4), DefaultLimits, true, false},
		{"note size 2^64-1", patch(good, ph0+32, ^uint64(0), 8), DefaultLimits, true, false},
		{"phoff past the end", patch(good, 32, 1<<40, 8), DefaultLimits, true, false},
		{"phoff in the header", patch(good, 32, 8, 8), DefaultLimits, true, false},
		{"phentsize", patch(good, 54, 55, 2), DefaultLimits, true, false},
		{"not a core", patch(good, 16, uint64(elf.ET_EXEC), 2), DefaultLimits, true, false},
		{"load past the end", patch(good, ph1+8, 1<<40, 8), DefaultLimits, false, true},
		// Lies in PT_LOADs: the core is returned with an error, and
		// its stream is still walked.
		{"load huge filesz", patch(patch(good, ph1+32, ^uint64(0), 8), ph1+16, 0, 8), DefaultLimits, true, true},
		{"load behind the notes", patch(good, ph1+8, 0, 8), DefaultLimits, true, false},
		{"note namesz huge", patch(good, int(noteOff), 0xffffffff, 4), DefaultLimits, true, false},
		{"note descsz huge", patch(good, int(noteOff)+4, 0xfffffff0, 4), DefaultLimits, true, false},
		{"prstatus short", patch(good, int(noteOff)+4, 100, 4), DefaultLimits, true, false},
		{"phnum over limit", good, Limits{MaxThreads: 1, MaxNoteBytes: 1 << 20, MaxSegments: 2, MaxFiles: 1}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c *Core
			var s *Stream
			var err, cerr error
			n := testutil.Allocated(func() {
				c, s, err = ReadHeader(bytes.NewReader(tc.b), tc.lim)
				if c != nil && s != nil {
					cerr = collectAll(c, s)
				}
			})
			if (err != nil) != tc.headerErr {
				t.Errorf("ReadHeader error %v, want error %v", err, tc.headerErr)
			}
			if (cerr != nil) != tc.collectErr {
				t.Errorf("Collect error %v, want error %v", cerr, tc.collectErr)
			}
			if n > 1<<20 {
				t.Errorf("allocated %d bytes for a %d-byte core", n, len(tc.b))
			}
		})
	}
}

// ntFileNote builds a core whose only notes are one NT_PRSTATUS and the
// given NT_FILE descriptor.
func ntFileCore(desc []byte) []byte {
	sc := &synthCore{class: elf.ELFCLASS64, machine: elf.EM_X86_64}
	sc.addThread(1, 11, nil)
	sc.addNote("CORE", ntFile, desc)
	return sc.bytes()
}

func TestNTFileMalformed(t *testing.T) {
	sc := &synthCore{class: elf.ELFCLASS64}
	for _, d := range [][]byte{
		nil,
		sc.put(sc.put(nil, 1), 4096),            // one entry, no room
		sc.put(sc.put(sc.put(nil, 1), 4096), 0), // 24 bytes claiming one entry
		sc.put(sc.put(make([]byte, 0), 1<<62), 4096),                     // huge count
		append(sc.ntfile(4096, []FileMapping{{0, 1, 0, "x"}})[:40], 'x'), // path not terminated
	} {
		c, _, err := ReadHeader(bytes.NewReader(ntFileCore(d)), DefaultLimits)
		if err == nil {
			t.Errorf("NT_FILE %x: no error (files %v)", d, c.Files)
		}
	}
}

// A core claiming a million threads or program headers costs what the
// stream holds, not what it claims.
func TestHugeClaims(t *testing.T) {
	// refused checks that ReadHeader refuses b under lim, having
	// allocated at most max bytes.
	refused := func(what string, b []byte, lim Limits, max uint64) {
		t.Helper()
		n := testutil.Allocated(func() {
			if _, _, err := ReadHeader(bytes.NewReader(b), lim); err == nil {
				t.Errorf("%s: no error", what)
			}
		})
		if n > max {
			t.Errorf("%s: allocated %d bytes", what, n)
		}
	}
	// PN_XNUM with the notes 10^6 program headers away.
	sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	sc.xnum = true
	b := sc.bytes()
	b = patch(b, 64+8, 64+56*1000000, 8)
	lim := DefaultLimits
	lim.MaxSegments = 2000000
	refused("PN_XNUM claiming 10^6 phdrs", b[:64+56*20], lim, 64<<10)

	// 10^6 NT_PRSTATUS notes claimed, 16 MiB-1 of PT_NOTE, stream short.
	sc = &synthCore{class: elf.ELFCLASS64, machine: elf.EM_X86_64}
	for i := 0; i < 100; i++ {
		sc.addThread(i+1, 0, nil)
	}
	b = sc.bytes()
	b = patch(b, 64+32, 16<<20-1, 8)
	refused("PT_NOTE claiming 16 MiB", b, DefaultLimits, 1<<20)

	// 10^6 threads really present (340 MB of notes) are refused by the
	// note budget before any is read.
	b = patch(b, 64+32, 1000000*352, 8)
	refused("PT_NOTE claiming 10^6 threads", b, DefaultLimits, 64<<10)

	// Many real threads, capped by MaxThreads.
	sc = &synthCore{class: elf.ELFCLASS64, machine: elf.EM_X86_64}
	for i := 0; i < 5000; i++ {
		sc.addThread(i+1, 0, nil)
	}
	b = sc.bytes()
	var c *Core
	n := testutil.Allocated(func() {
		var err error
		c, _, err = ReadHeader(bytes.NewReader(b), DefaultLimits)
		if err != nil {
			t.Error(err)
		}
	})
	if len(c.Threads) != DefaultLimits.MaxThreads || c.Skipped != 5000-DefaultLimits.MaxThreads {
		t.Errorf("%d threads, %d skipped", len(c.Threads), c.Skipped)
	}
	if n > 4*uint64(len(b))+uint64(DefaultLimits.MaxThreads)*(64*8+128)*2 {
		t.Errorf("%d threads: allocated %d bytes", len(c.Threads), n)
	}
}

// Every prefix of a valid core is an error or a partial result; none
// panics.
func TestTruncation(t *testing.T) {
	for i, a := range sampleArches {
		t.Run(a.name, func(t *testing.T) {
			sc := sample(i)
			b := sc.bytes()
			hdrEnd := int(sc.segs[0].offset)
			for n := 0; n <= len(b); n++ {
				if n > hdrEnd && n < len(b) && n%61 != 0 {
					continue
				}
				c, s, err := ReadHeader(bytes.NewReader(b[:n]), DefaultLimits)
				if n < hdrEnd-4096+1 && err == nil {
					// Before the end of the notes ReadHeader must fail
					// (the page padding after them is not needed).
					notesEnd := int(binary.LittleEndian.Uint64(b[64+8:]) + binary.LittleEndian.Uint64(b[64+32:]))
					if sc.class == elf.ELFCLASS32 {
						o := sc.ord()
						notesEnd = int(o.Uint32(b[52+4:]) + o.Uint32(b[52+16:]))
					}
					if n < notesEnd {
						t.Fatalf("prefix of %d bytes (notes end at %d): no error", n, notesEnd)
					}
				}
				if err == nil {
					m, cerr := s.Collect(c.Segments, func(sg Segment) []Range { return []Range{{sg.Vaddr, sg.Vaddr + sg.Filesz}} }, 1<<20)
					if (cerr == nil) != (n == len(b)) {
						t.Fatalf("prefix of %d/%d bytes: Collect error %v", n, len(b), cerr)
					}
					if m == nil {
						t.Fatalf("prefix of %d bytes: nil Memory", n)
					}
				}
				if _, fm, err := OpenFile(bytes.NewReader(b[:n]), int64(n), DefaultLimits); err == nil {
					p := make([]byte, 16)
					fm.ReadAt(p, 0x400000)
				}
			}
		})
	}
}
