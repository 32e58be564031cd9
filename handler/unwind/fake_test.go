package unwind

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/regs"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// fakeMem is a process's memory as a few byte regions.
type fakeMem struct {
	regions []region
}

type region struct {
	addr uint64
	b    []byte
}

func (m *fakeMem) ReadAt(p []byte, off int64) (int, error) {
	a := uint64(off)
	for _, r := range m.regions {
		if a >= r.addr && a < r.addr+uint64(len(r.b)) {
			n := copy(p, r.b[a-r.addr:])
			if n < len(p) {
				return n, fmt.Errorf("short read at %#x", a)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no memory at %#x", a)
}

// at returns the bytes at addr for writing.
func (m *fakeMem) at(addr uint64, n int) []byte {
	for _, r := range m.regions {
		if addr >= r.addr && addr+uint64(n) <= r.addr+uint64(len(r.b)) {
			return r.b[addr-r.addr:][:n]
		}
	}
	panic(fmt.Sprintf("fake memory: nothing at %#x", addr))
}

// fakeProc is a process with one executable module of code at codeBase and
// a stack below stackTop, all in memory: the module has no file, so code
// is read from memory and no function start is known.
type fakeProc struct {
	t     *testing.T
	a     *arch.Arch
	mem   *fakeMem
	mods  []*module.Module
	order binary.ByteOrder
}

const (
	codeBase  = 0x10000
	codeSize  = 0x10000
	stackBase = 0x7f0000
	stackSize = 0x10000
)

func newFake(t *testing.T, a *arch.Arch) *fakeProc {
	m := &module.Module{Path: "/bin/app", Start: codeBase, End: codeBase + codeSize,
		Maps: []module.Mapping{{Start: codeBase, End: codeBase + codeSize, Path: "/bin/app", Perms: "r-xp"}}}
	m.RuntimeOffset = codeBase
	return &fakeProc{t: t, a: a, order: a.Order, mods: []*module.Module{m},
		mem: &fakeMem{regions: []region{
			{codeBase, make([]byte, codeSize)},
			{stackBase, make([]byte, stackSize)},
		}}}
}

func (f *fakeProc) word(addr uint64, v uint64) {
	if f.a.PtrSize == 4 {
		f.order.PutUint32(f.mem.at(addr, 4), uint32(v))
	} else {
		f.order.PutUint64(f.mem.at(addr, 8), v)
	}
}

// record writes a frame record at fp as x86's rbp chain and AArch64's
// {x29, x30} lay it out: the previous frame pointer, then the return
// address.
func (f *fakeProc) record(fp, prev, ra uint64) {
	f.word(fp, prev)
	f.word(fp+uint64(f.a.PtrSize), ra)
}

func (f *fakeProc) insn32(addr uint64, w uint32) { f.order.PutUint32(f.mem.at(addr, 4), w) }
func (f *fakeProc) insn16(addr uint64, h uint16) { f.order.PutUint16(f.mem.at(addr, 2), h) }
func (f *fakeProc) code(addr uint64, b ...byte)  { copy(f.mem.at(addr, len(b)), b) }

func (f *fakeProc) unwind(pc uint64, rs regs.Set, o Options) Result {
	sort.Slice(f.mods, func(i, j int) bool { return f.mods[i].Start < f.mods[j].Start })
	return Unwind(&Process{Arch: f.a, Modules: f.mods, Mem: f.mem}, pc, rs, o)
}

// regsOf is the register set holding each DWARF register number's value.
func regsOf(vals map[int]uint64) regs.Set {
	var rs regs.Set
	for n, v := range vals {
		rs.Set(n, v)
	}
	return rs
}

// loadFile loads the ELF file at path as a module's file, open until the
// test ends.
func loadFile(tb testing.TB, path string) *module.File {
	tb.Helper()
	r, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	f, err := module.Load(r)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// call writes a direct call from at to target in the fake's instruction
// set, the inverse of arch's call decoders: BL on AArch64 and on ARM (A32;
// Thumb's is blThumb), JAL ra on RISC-V, CALL rel32 on x86.
func (f *fakeProc) call(at, target uint64) {
	d := int64(target) - int64(at)
	switch f.a {
	case arch.AArch64:
		f.insn32(at, 0x94000000|uint32(d/4)&0x03FFFFFF)
	case arch.ARM:
		f.insn32(at, 0xEB000000|uint32((d-8)/4)&0x00FFFFFF)
	case arch.RISCV64:
		off := uint32(d)
		f.insn32(at, off>>20&1<<31|off>>1&0x3FF<<21|off>>11&1<<20|off>>12&0xFF<<12|1<<7|0x6F)
	case arch.X86_64:
		b := []byte{0xE8, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], uint32(d-5))
		f.code(at, b...)
	default:
		f.t.Fatalf("no call encoder for %s", f.a.Name)
	}
}

// blThumb encodes a Thumb-2 BL from at to target.
func blThumb(at, target uint64) (uint16, uint16) {
	off := uint32(int64(target) - int64(at) - 4)
	s := off >> 24 & 1
	i1, i2 := off>>23&1, off>>22&1
	j1, j2 := ^(i1^s)&1, ^(i2^s)&1
	return uint16(0xF000 | s<<10 | off>>12&0x3FF), uint16(0xD000 | j1<<13 | j2<<11 | off>>1&0x7FF)
}

type want struct {
	pc     uint64
	method string
	trust  Trust
}

func check(t *testing.T, r Result, ws ...want) {
	t.Helper()
	ok := len(r.Frames) == len(ws)
	for i := 0; ok && i < len(ws); i++ {
		f := r.Frames[i]
		ok = f.PC == ws[i].pc && f.Method == ws[i].method && f.Trust == ws[i].trust
	}
	if ok {
		return
	}
	logFrames(t, r)
	t.Errorf("frames differ from %v (stop %s: %s)", ws, r.Stop, r.Detail)
}

// checkFirst checks the first len(ws) frames of r, and stops the test when
// there are fewer.
func checkFirst(t *testing.T, r Result, ws ...want) {
	t.Helper()
	if len(r.Frames) < len(ws) {
		t.Fatalf("%d frames (stop %s: %s)", len(r.Frames), r.Stop, r.Detail)
	}
	check(t, Result{Frames: r.Frames[:len(ws)]}, ws...)
}

// logFrames logs r's frames, before a test says what is wrong with them.
func logFrames(t *testing.T, r Result) {
	t.Helper()
	for i, f := range r.Frames {
		t.Logf("  #%d %#x %s %s", i, f.PC, f.Method, f.Trust)
	}
}
