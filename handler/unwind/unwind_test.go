package unwind

import (
	"errors"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

func TestStrategiesKnown(t *testing.T) {
	for _, a := range []*arch.Arch{arch.X86_64, arch.AArch64, arch.ARM, arch.RISCV64} {
		if len(a.Strategies) == 0 {
			t.Errorf("%s: no strategies", a.Name)
		}
		for _, n := range a.Strategies {
			if _, ok := strategies[n]; !ok {
				t.Errorf("%s: unknown strategy %q", a.Name, n)
			}
		}
		if got := len(strategiesFor(a, true)); got != len(a.Strategies)-1 {
			t.Errorf("%s: %d strategies without scan, want %d", a.Name, got, len(a.Strategies)-1)
		}
	}
}

// AArch64, three functions laid out main < f1 < f2, each calling the next
// with BL: frame 0 in the leaf f2 (LR), then the {x29, x30} records.
func TestAArch64LeafThenFrameRecords(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const start, mainFn, f1, f2 = 0x10000, 0x10100, 0x10200, 0x10300
	f.call(start+0x40, mainFn)
	f.call(mainFn+0x40, f1)
	f.call(f1+0x40, f2)
	sp := uint64(stackBase + 0x1000)
	fp1, fp2 := sp+0x20, sp+0x80
	f.record(fp1, fp2, mainFn+0x44)
	f.record(fp2, 0, start+0x44)
	r := f.unwind(f2+0x10, regsOf(map[int]uint64{31: sp, 29: fp1, 30: f1 + 0x44}), Options{})
	check(t, r,
		want{f2 + 0x10, MethodContext, TrustHigh},
		want{f1 + 0x44, MethodLR, TrustMedium},
		want{mainFn + 0x44, MethodFP, TrustMedium},
		want{start + 0x44, MethodFP, TrustMedium})
	if r.Stop != StopNoUnwindInfo || !strings.Contains(r.Detail, "/bin/app: cfi: file not loaded; fp: ") || !strings.Contains(r.Detail, "scan: ") {
		t.Errorf("stop %s: %q, want each strategy's reason", r.Stop, r.Detail)
	}
}

// The -O2 -fomit-frame-pointer case of issue 16: f1 saved {x29, x30} but
// did not point x29 at them, so x29 still points at an outer record whose
// return address comes from a call that cannot reach f1. The FP step must
// not be taken; the scan finds f1's saved return address, at low trust.
func TestAArch64StaleFramePointerNotFollowed(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const start, f1, f2, mainFn = 0x10000, 0x10200, 0x10300, 0x10400
	f.call(start+0x40, mainFn)
	f.call(mainFn+0x40, f1)
	f.call(f1+0x40, f2)
	sp := uint64(stackBase + 0x1000)
	outer := sp + 0x100
	f.record(sp, outer, mainFn+0x44) // f1's saved x29, x30
	f.record(outer, 0, start+0x44)   // the outer record
	f.word(sp+0x40, f2+0x100)        // a code address after no call
	rs := regsOf(map[int]uint64{31: sp, 29: outer, 30: f1 + 0x44})
	r := f.unwind(f2+0x10, rs, Options{})
	check(t, r,
		want{f2 + 0x10, MethodContext, TrustHigh},
		want{f1 + 0x44, MethodLR, TrustMedium},
		want{mainFn + 0x44, MethodScan, TrustLow},
		want{start + 0x44, MethodScan, TrustLow})
	if len(r.Frames) > 1 && r.Frames[1].Method == MethodFP {
		t.Error("followed the stale frame pointer")
	}
	r = f.unwind(f2+0x10, rs, Options{NoScan: true})
	check(t, r,
		want{f2 + 0x10, MethodContext, TrustHigh},
		want{f1 + 0x44, MethodLR, TrustMedium})
	if !strings.Contains(r.Detail, "above the pc") {
		t.Errorf("detail %q does not say why the record was refused", r.Detail)
	}
}

// A call through a NULL pointer: frame 0's PC is in no module; x86 takes
// the return address at [SP], then scans past a code address that follows
// no call.
func TestX86NullCallThenScan(t *testing.T) {
	f := newFake(t, arch.X86_64)
	const caller, callee = 0x10000, 0x10100
	f.call(caller+0x4b, callee)
	f.code(callee+0x3, 0xFF, 0xD0) // call *%rax
	sp := uint64(stackBase + 0x1000)
	f.word(sp, callee+0x5)
	f.word(sp+0x10, callee+0x20)   // code, but not after a call
	f.word(sp+0x18, stackBase+0x5) // a stack address
	f.word(sp+0x28, caller+0x50)
	r := f.unwind(0, regsOf(map[int]uint64{7: sp}), Options{})
	check(t, r,
		want{0, MethodContext, TrustHigh},
		want{callee + 0x5, MethodLR, TrustMedium},
		want{caller + 0x50, MethodScan, TrustLow})
	if len(r.Frames) == 3 && r.Frames[2].SP != sp+0x30 {
		t.Errorf("scan frame SP %#x, want %#x", r.Frames[2].SP, sp+0x30)
	}
}

// x86 with a frame-pointer chain: rbp records validated by CALL rel32.
func TestX86FramePointer(t *testing.T) {
	f := newFake(t, arch.X86_64)
	const a, b, c = 0x10000, 0x10100, 0x10200
	f.call(a+0x10, b)
	f.call(b+0x10, c)
	sp := uint64(stackBase + 0x1000)
	rbp1, rbp2 := sp+0x10, sp+0x40
	f.record(rbp1, rbp2, b+0x15)
	f.record(rbp2, 0, a+0x15)
	r := f.unwind(c+0x8, regsOf(map[int]uint64{7: sp, 6: rbp1}), Options{NoScan: true})
	check(t, r,
		want{c + 0x8, MethodContext, TrustHigh},
		want{b + 0x15, MethodFP, TrustMedium},
		want{a + 0x15, MethodFP, TrustMedium})
}

// A32 with GCC's -fno-omit-frame-pointer records (lr at [fp], the previous
// fp at [fp-4]), and the APCS form (lr at [fp-4], fp at [fp-12]).
func TestARMFrameRecords(t *testing.T) {
	f := newFake(t, arch.ARM)
	const a, b, c = 0x10000, 0x10100, 0x10200
	f.call(a+0x10, b)
	f.call(b+0x10, c)
	sp := uint64(stackBase + 0x1000)
	fp1, fp2 := sp+0x14, sp+0x4c
	f.word(fp1, b+0x14) // gcc: lr at [fp]
	f.word(fp1-4, fp2)
	f.word(fp2-4, a+0x14) // apcs: lr at [fp-4], fp at [fp-12]
	f.word(fp2-12, 0)
	f.word(fp2, 0xdead) // the saved pc slot: not code
	r := f.unwind(c+0x8, regsOf(map[int]uint64{13: sp, 11: fp1}), Options{NoScan: true})
	check(t, r,
		want{c + 0x8, MethodContext, TrustHigh},
		want{b + 0x14, MethodFP, TrustMedium},
		want{a + 0x14, MethodFP, TrustMedium})
}

// Thumb frames never follow r7; a scan finds the return address after a
// Thumb BL (bit 0 set: the caller is Thumb too).
func TestThumbNoFramePointerScan(t *testing.T) {
	f := newFake(t, arch.ARM)
	const b, c = 0x10100, 0x10200
	h1, h2 := blThumb(b+0x10, c)
	f.insn16(b+0x10, h1)
	f.insn16(b+0x12, h2)
	sp := uint64(stackBase + 0x1000)
	f.word(sp+4, c+0x41) // code, after no call
	f.word(sp+0xc, (b+0x14)|1)
	f.word(sp+0x20, sp+0x40) // r7 would point here
	f.word(sp+0x24, c+0x81)
	r := f.unwind((c+0x8)|1, regsOf(map[int]uint64{13: sp, 7: sp + 0x20}), Options{Thumb: true})
	check(t, r,
		want{c + 0x8, MethodContext, TrustHigh},
		want{b + 0x14, MethodScan, TrustLow})
	if len(r.Frames) > 1 && !r.Frames[1].Thumb {
		t.Error("frame 1 not in Thumb state")
	}
}

// RISC-V: frame 0 a leaf (ra), then the s0 chain with {ra at fp-8, prev
// fp at fp-16}, s0 being the caller's SP.
func TestRISCVFramePointer(t *testing.T) {
	f := newFake(t, arch.RISCV64)
	const a, b, c = 0x10000, 0x10100, 0x10200
	f.call(a+0x10, b)
	f.call(b+0x10, c)
	sp := uint64(stackBase + 0x1000)
	fp1 := sp + 0x30 // b's frame: its CFA
	fp2 := fp1 + 0x40
	f.word(fp1-8, a+0x14)
	f.word(fp1-16, fp2)
	f.word(fp2-8, 0)
	f.word(fp2-16, 0)
	r := f.unwind(c+0x8, regsOf(map[int]uint64{2: sp, 8: fp1, 1: b + 0x14}), Options{NoScan: true})
	check(t, r,
		want{c + 0x8, MethodContext, TrustHigh},
		want{b + 0x14, MethodLR, TrustMedium},
		want{a + 0x14, MethodFP, TrustMedium})
	if len(r.Frames) == 3 && r.Frames[2].SP != fp1 {
		t.Errorf("frame 2 SP %#x, want s0 %#x", r.Frames[2].SP, fp1)
	}
}

// LR pointing into the function itself, after a call it made (the
// function is not a leaf and LR was reused): the call site lies between
// the call's target and the PC, so LR is refused.
func TestLRReusedRefused(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const g, fn = 0x10100, 0x10200
	f.call(fn+0x20, g)
	sp := uint64(stackBase + 0x1000)
	r := f.unwind(fn+0x40, regsOf(map[int]uint64{31: sp, 30: fn + 0x24}), Options{NoScan: true})
	check(t, r, want{fn + 0x40, MethodContext, TrustHigh})
	if !strings.Contains(r.Detail, "lies between its target and the pc") {
		t.Errorf("detail %q", r.Detail)
	}
}

// An indirect call cannot be checked against the callee: LR through BLR is
// taken at low trust, and so is every frame unwound from it.
func TestIndirectCallIsLowTrust(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const a, b, c = 0x10000, 0x10100, 0x10200
	f.call(a+0x10, b)
	f.insn32(b+0x10, 0xD63F0100) // blr x8
	sp := uint64(stackBase + 0x1000)
	fp1 := sp + 0x20
	f.record(fp1, 0, a+0x14)
	r := f.unwind(c+0x8, regsOf(map[int]uint64{31: sp, 29: fp1, 30: b + 0x14}), Options{NoScan: true})
	check(t, r,
		want{c + 0x8, MethodContext, TrustHigh},
		want{b + 0x14, MethodLR, TrustLow},
		want{a + 0x14, MethodFP, TrustLow})
}

// A signal interrupted a call through a NULL pointer: the signal frame
// gives PC 0, and the walk goes on from the saved LR (issue 16), as it
// does for frame 0.
func TestSignalFrameToNullPC(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const tramp, caller = 0x10800, 0x10100
	f.insn32(tramp, 0xd2801168) // mov x8, #139
	f.insn32(tramp+4, 0xd4000001)
	f.insn32(caller+0x10, 0xD63F0100) // blr x8
	sp := uint64(stackBase + 0x1000)
	base := sp + 128 + 176 + 8
	f.word(base+30*8, caller+0x14) // x30
	f.word(base+31*8, sp+0x800)    // sp
	f.word(base+32*8, 0)           // pc
	r := f.unwind(tramp, regsOf(map[int]uint64{31: sp}), Options{NoScan: true})
	check(t, r,
		want{tramp, MethodContext, TrustHigh},
		want{0, MethodSignal, TrustHigh},
		want{caller + 0x14, MethodLR, TrustMedium})
}

// AArch64 code without tables: a frame-pointer step from the handler
// reaches the vDSO trampoline with only a lower bound for SP. The signal
// frame is found below the frame record the kernel put above it (the
// handler's x29 at entry): its FP/SIMD record chains to the terminator,
// and the interrupted x29/x30 it saved match that record. A record that
// does not match gives no frame.
func TestAArch64SignalFrameBelowKernelRecord(t *testing.T) {
	for _, match := range []bool{true, false} {
		f := newFake(t, arch.AArch64)
		const tramp, handler, victim = 0x10800, 0x10200, 0x10400
		f.insn32(tramp, 0xd2801168) // mov x8, #139
		f.insn32(tramp+4, 0xd4000001)
		sp := uint64(stackBase + 0x1000)
		next := sp + 0x2000                 // the kernel's frame record
		b := next - 4688                    // struct rt_sigframe, no extra context
		f.record(sp, next, tramp)           // the handler's record: {x29, x30}
		f.word(b+592, 0x46508001|0x210<<32) // FPSIMD_MAGIC, 528 bytes
		f.word(b+592+0x210, 0)              // terminator
		regs0 := b + 128 + 176 + 8
		f.word(regs0+29*8, 0)
		f.word(regs0+30*8, 0x1234)
		f.word(regs0+31*8, next+0x100)
		f.word(regs0+32*8, victim+0x8)
		ra := uint64(0x4321)
		if match {
			ra = 0x1234 // the interrupted x30, as the kernel repeats it
		}
		f.record(next, 0, ra)
		r := f.unwind(handler+0x10, regsOf(map[int]uint64{31: sp, 29: sp}), Options{NoScan: true})
		ws := []want{{handler + 0x10, MethodContext, TrustHigh}, {tramp, MethodFP, TrustMedium}}
		if match {
			ws = append(ws, want{victim + 0x8, MethodSignal, TrustLow})
		}
		check(t, r, ws...)
	}
}

// A stack word into a module whose file could not be loaded may be a
// return address the scan can neither check nor tell from data: the scan
// stops there rather than take a word above it and skip that frame.
func TestScanStopsAtUnloadedModule(t *testing.T) {
	for _, loaded := range []bool{true, false} {
		f := newFake(t, arch.AArch64)
		lib := &module.Module{Path: "/lib/libc.so.6", Start: 0x400000, End: 0x410000,
			Maps: []module.Mapping{{Start: 0x400000, End: 0x410000, Path: "/lib/libc.so.6", Perms: "r-xp"}}}
		if !loaded {
			lib.Err = errors.New("file operation timed out")
		}
		f.mods = append(f.mods, lib)
		const a, c = 0x10000, 0x10200
		f.call(a+0x10, c)
		sp := uint64(stackBase + 0x1000)
		f.word(sp+8, 0x400123)
		f.word(sp+0x10, a+0x14)
		rs := regsOf(map[int]uint64{31: sp})
		r := f.unwind(c+0x8, rs, Options{})
		if loaded {
			check(t, r, want{c + 0x8, MethodContext, TrustHigh}, want{a + 0x14, MethodScan, TrustLow})
			continue
		}
		check(t, r, want{c + 0x8, MethodContext, TrustHigh})
		if !strings.Contains(r.Detail, "whose file is not loaded") {
			t.Errorf("stop detail %q", r.Detail)
		}
	}
}

// clang omits saving the link register before a call that does not
// return (ab2: str w0, [x8]; bl abort): the return address into ab2's
// caller is nowhere on the stack. The walk stops there, saying why,
// instead of scanning up to a return address that skips ab1 and main.
func TestAArch64LostReturnAddressStops(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const ab1, ab2, abort, outer = 0x10100, 0x10200, 0x10400, 0x10600
	f.call(ab1+4, ab2)
	f.insn32(ab2, 0xb9009900)        // str w0, [x8, #152]
	f.call(ab2+4, abort)             // bl abort
	f.insn32(abort, 0xd503201f)      // nop: a leaf so far
	f.insn32(outer+0x10, 0xd63f0100) // blr x8: main's caller
	f.withFile()
	sp := uint64(stackBase + 0x1000)
	f.word(sp+0x18, outer+0x14) // what a scan would take
	r := f.unwind(abort+4, regsOf(map[int]uint64{31: sp, 30: ab2 + 8}), Options{})
	check(t, r,
		want{abort + 4, MethodContext, TrustHigh},
		want{ab2 + 8, MethodLR, TrustMedium})
	if r.Stop != StopUndefinedRA || !strings.Contains(r.Detail, "saved no return address") {
		t.Errorf("stop %s: %q, want undefined_ra: the return address was lost", r.Stop, r.Detail)
	}
}
