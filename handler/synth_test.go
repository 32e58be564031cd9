package handler

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/testkit/testbin"
)

// A small AArch64 core writer for hostile-input and supervision tests: the
// layout the kernel writes (ELF header, PT_NOTE, PT_LOADs, notes, page
// padding, segment data), with every field reachable so a test can lie in
// any of them. Generated in the test, never committed as blobs.

type synthThread struct {
	tid            int
	pc, sp, lr, fp uint64
}

type synthSeg struct {
	vaddr, memsz uint64
	flags        uint32
	data         []byte // file bytes; len(data) is p_filesz
}

type synthFile struct {
	start, end, pgoff uint64
	path              string
}

type synthCore struct {
	threads []synthThread
	segs    []synthSeg
	files   []synthFile
	pid     int
	comm    string
	signo   int32
	addr    uint64
	extra   [][]byte // raw extra note records, appended after the rest
}

var le = binary.LittleEndian

// nw writes the notes, as the kernel does for an AArch64 process.
var nw = coredump.NoteWriter{Class: elf.ELFCLASS64, Order: le, Machine: elf.EM_AARCH64}

func note(name string, typ uint32, desc []byte) []byte { return nw.AppendNote(nil, name, typ, desc) }

// prstatus is a thread's NT_PRSTATUS: x29, x30 (the link register), sp
// and pc set.
func prstatus(t synthThread, sig int) []byte {
	regs := make([]uint64, 33)
	regs[29], regs[30], regs[31], regs[32] = t.fp, t.lr, t.sp, t.pc
	return nw.PRStatus(t.tid, sig, regs)
}

func (c *synthCore) notes() []byte {
	var b []byte
	sig := int(c.signo)
	for i, t := range c.threads {
		b = append(b, note("CORE", 1, prstatus(t, sig))...)
		if i == 0 {
			b = append(b, note("CORE", 3, nw.PRPSInfo(c.pid, 0, 0, 0, c.comm, ""))...)
			b = append(b, note("CORE", 0x53494749, nw.SigInfo(c.signo, 0, 1, c.addr))...)
			b = append(b, note("CORE", 6, nw.Auxv(coredump.AT_PAGESZ, 4096))...)
			if len(c.files) > 0 {
				fs := make([]coredump.FileMapping, len(c.files))
				for i, f := range c.files {
					fs[i] = coredump.FileMapping{Start: f.start, End: f.end, Offset: f.pgoff * 4096, Path: f.path}
				}
				b = append(b, note("CORE", 0x46494c45, nw.File(4096, fs))...)
			}
		}
	}
	for _, e := range c.extra {
		b = append(b, e...)
	}
	return b
}

// layout returns the core's bytes and the offsets of its program headers
// (index 0 is PT_NOTE) for tests that patch them.
func (c *synthCore) layout() (out []byte, phOff []int) {
	l := coredump.CoreLayout{NoteWriter: nw, Notes: c.notes()}
	for _, s := range c.segs {
		l.Segs = append(l.Segs, coredump.CoreSegment{Vaddr: s.vaddr, Filesz: uint64(len(s.data)), Memsz: s.memsz, Flags: elf.ProgFlag(s.flags)})
	}
	out, phOff, _ = l.Header()
	for _, s := range c.segs {
		out = append(out, s.data...)
	}
	return out, phOff
}

func (c *synthCore) bytes() []byte { b, _ := c.layout(); return b }

// file writes the core into dir and returns its path.
func (c *synthCore) file(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "core")
	if err := os.WriteFile(path, c.bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stackCore is a plausible crash: two threads, their stacks dumped, an
// executable mapping from NT_FILE the PCs fall in.
func stackCore() *synthCore {
	const stack = 0x7ff0000000
	data := make([]byte, 16<<10)
	return &synthCore{
		pid: 4242, comm: "victim", signo: 11, addr: 0xdead0000,
		threads: []synthThread{
			{tid: 4242, pc: 0x400123, lr: 0x400456, sp: stack + 0x1000, fp: stack + 0x1100},
			{tid: 4243, pc: 0x400789, lr: 0x400abc, sp: stack + 0x2000, fp: stack + 0x2100},
		},
		segs: []synthSeg{
			{vaddr: stack, memsz: uint64(len(data)), flags: 6, data: data},
		},
		files: []synthFile{{start: 0x400000, end: 0x401000, path: "/usr/bin/victim"}},
	}
}

func patch(b []byte, off int, v uint64, size int) []byte {
	b = bytes.Clone(b)
	switch size {
	case 2:
		le.PutUint16(b[off:], uint16(v))
	case 4:
		le.PutUint32(b[off:], uint32(v))
	default:
		le.PutUint64(b[off:], v)
	}
	return b
}

// handlerBinary is cmd/unwound-handler, built with tags (e.g.
// unwoundfault) once per test process.
func handlerBinary(t testing.TB, tags string) string {
	t.Helper()
	return testbin.Build(t, "unwound-handler", tags)
}

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }
