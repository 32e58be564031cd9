package unwind

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// musl's __restore_rt, the restorer of SA_SIGINFO handlers, per
// architecture.
var (
	restoreRtX86   = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05} // mov $15, %rax; syscall
	restoreRtA64   = []byte{0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4}       // mov x8, #139; svc 0
	restoreRtThumb = []byte{0x4f, 0xf0, 0xad, 0x07, 0x00, 0xdf}                   // mov.w r7, #173; svc 0
)

// musl's signal restorers (src/signal/*/restore.s) carry no unwind
// information: the signal strategy must know them by their bytes, in the
// program (static) or in libc.so, not only in the vDSO or [sigpage].
func TestMuslRestorersRecognised(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *arch.Arch
		code []byte
		// where the interrupted SP and PC sit, from SP at the restorer
		spAt, pcAt uint64
		cpsrAt     uint64 // ARM: the saved CPSR, 0 when none
	}{
		{"x86_64 __restore_rt", arch.X86_64, restoreRtX86, 0x28 + 120, 0x28 + 128, 0},
		{"aarch64 __restore_rt", arch.AArch64, restoreRtA64, 128 + 176 + 8 + 31*8, 128 + 176 + 8 + 32*8, 0},
		// Debian's armhf musl is Thumb-2.
		{"arm __restore_rt (Thumb-2)", arch.ARM, restoreRtThumb, 160 + 13*4, 160 + 15*4, 160 + 16*4},
		// mov.w r7, #119; svc 0
		{"arm __restore (Thumb-2)", arch.ARM, []byte{0x4f, 0xf0, 0x77, 0x07, 0x00, 0xdf}, 32 + 13*4, 32 + 15*4, 32 + 16*4},
		// musl built for A32: mov r7, #173; svc 0
		{"arm __restore_rt (A32)", arch.ARM, []byte{0xad, 0x70, 0xa0, 0xe3, 0x00, 0x00, 0x00, 0xef}, 160 + 13*4, 160 + 15*4, 160 + 16*4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.a)
			const tramp, interrupted = 0x12000, 0x10124
			f.code(tramp, tc.code...)
			sp := uint64(stackBase + 0x1000)
			f.word(sp+tc.spAt, sp+0x800)
			f.word(sp+tc.pcAt, interrupted)
			if tc.cpsrAt != 0 {
				f.word(sp+tc.cpsrAt, arch.CPSRThumb)
			}
			rs := regsOf(map[int]uint64{tc.a.SP: sp})
			r := f.unwind(tramp, rs, Options{NoScan: true})
			if len(r.Frames) < 2 {
				t.Fatalf("%d frames (stop %s: %s), want the interrupted one", len(r.Frames), r.Stop, r.Detail)
			}
			fr := r.Frames[1]
			if fr.PC != interrupted || fr.Method != MethodSignal || fr.Trust != TrustHigh || !fr.Exact || fr.SP != sp+0x800 {
				t.Errorf("frame 1: %+v, want the interrupted pc %#x by signal, exact, SP %#x", fr, uint64(interrupted), sp+0x800)
			}
			if tc.cpsrAt != 0 && !fr.Thumb {
				t.Error("frame 1 not in Thumb state (saved CPSR)")
			}
		})
	}
}

// raise in a libc without tables, on x86: musl's sigaction passed the
// restorer's address to the kernel in a struct on the stack, and raise's
// frame now holds a stale copy of it above the return address... below it
// in the scan's way. Taken, it would read a signal frame out of garbage;
// the scan must refuse it and find raise's caller.
func TestScanRefusesStaleRestorer(t *testing.T) {
	f := newFake(t, arch.X86_64)
	const caller, raise, tramp = 0x10000, 0x10100, 0x12000
	f.code(tramp, restoreRtX86...)
	f.call(caller+0x20, raise)
	sp := uint64(stackBase + 0x1000)
	f.word(sp+0x10, tramp)        // stale; zeros above: no interrupted context
	f.word(sp+0x200, caller+0x25) // raise's return address
	r := f.unwind(raise+0x30, regsOf(map[int]uint64{7: sp}), Options{})
	check(t, r,
		want{raise + 0x30, MethodContext, TrustHigh},
		want{caller + 0x25, MethodScan, TrustLow})
}

// ARM Thumb: a handler without tables whose caller is musl's restorer in
// the program (the kernel set LR to sa_restorer, the handler pushed it):
// the scan takes it because the signal frame above the slot holds a
// plausible context, and the walk goes on into the interrupted code.
func TestScanTakesRestorerWithSignalFrame(t *testing.T) {
	f := newFake(t, arch.ARM)
	const handler, tramp, interrupted = 0x10400, 0x12000, 0x10124
	f.code(tramp, restoreRtThumb...)
	sp := uint64(stackBase + 0x1000)
	slot := sp + 0xc
	f.word(slot, tramp|1)
	frame := slot + 4 // the rt_sigframe: the handler's SP on entry
	f.word(frame+160+13*4, frame+0x400)
	f.word(frame+160+15*4, interrupted)
	f.word(frame+160+16*4, arch.CPSRThumb)
	rs := regsOf(map[int]uint64{13: sp})
	r := f.unwind(handler+0x10|1, rs, Options{Thumb: true})
	checkFirst(t, r,
		want{handler + 0x10, MethodContext, TrustHigh},
		want{tramp, MethodScan, TrustLow},
		want{interrupted, MethodSignal, TrustLow})

	// The same slot with nothing above it: refused.
	f.word(frame+160+13*4, 0)
	r = f.unwind(handler+0x10|1, rs, Options{Thumb: true})
	for _, fr := range r.Frames[1:] {
		if fr.PC == tramp {
			t.Errorf("took the restorer's address without a signal frame above it")
		}
	}
	if !strings.Contains(r.Detail, "scan: ") {
		t.Errorf("stop %s: %q", r.Stop, r.Detail)
	}
}

// withFile gives the fake's module a file: a minimal ELF whose one PT_LOAD
// (r-x, offset 0, address 0) holds the code region as it is now, so
// prologue analysis can read the code. The ELF headers overwrite the
// first bytes of the region: keep code away from codeBase.
func (f *fakeProc) withFile() {
	img := append([]byte(nil), f.mem.at(codeBase, codeSize)...)
	le := binary.LittleEndian
	copy(img, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le.PutUint16(img[16:], 3) // ET_DYN
	le.PutUint16(img[18:], uint16(f.a.Machine))
	le.PutUint32(img[20:], 1)
	le.PutUint64(img[32:], 64) // e_phoff
	le.PutUint16(img[52:], 64)
	le.PutUint16(img[54:], 56)
	le.PutUint16(img[56:], 1) // e_phnum
	ph := img[64:]
	le.PutUint32(ph[0:], 1) // PT_LOAD
	le.PutUint32(ph[4:], 5) // PF_R|PF_X
	le.PutUint64(ph[32:], codeSize)
	le.PutUint64(ph[40:], codeSize)
	le.PutUint64(ph[48:], 0x1000)
	m := f.mods[0]
	if err := m.LoadFrom(bytes.NewReader(img)); err != nil {
		f.t.Fatal(err)
	}
}

// RISC-V, no tables: the function holding the PC was called directly, and
// its prologue saved ra at sp+24; below that slot, in its own frame, lies
// a stale return address after a call through a pointer, which no check
// can reject. The scan must not take the first word that passes: the
// prologue-confirmed one above it says where the frame ends.
func TestScanPrefersConfirmedOverStaleIndirect(t *testing.T) {
	f := newFake(t, arch.RISCV64)
	const g, fn, h = 0x10200, 0x10400, 0x10600
	f.call(g+0x10, fn)
	f.insn32(fn, 0xfe010113)   // addi sp, sp, -32
	f.insn32(fn+4, 0x00113c23) // sd ra, 24(sp)
	for pc := uint64(fn + 8); pc < fn+0x20; pc += 4 {
		f.insn32(pc, 0x00000013) // nop
	}
	f.insn16(h+0x10, 0x9782) // c.jalr a5
	f.withFile()
	sp := uint64(stackBase + 0x1000)
	f.word(sp+8, h+0x12)  // stale
	f.word(sp+24, g+0x14) // saved ra
	rs := regsOf(map[int]uint64{2: sp})
	r := f.unwind(fn+0x20, rs, Options{})
	checkFirst(t, r,
		want{fn + 0x20, MethodContext, TrustHigh},
		want{g + 0x14, MethodPrologue, TrustMedium})
}

// A noreturn call as the last instruction of the executable segment: its
// return address is the first byte past the code (RISC-V gcc+mold's main
// ends in the call to ab1). It is still a return address.
func TestReturnAddressPastEndOfCode(t *testing.T) {
	f := newFake(t, arch.AArch64)
	m := f.mods[0]
	m.Maps = []module.Mapping{
		{Start: codeBase, End: codeBase + 0x1000, Path: m.Path, Perms: "r-xp"},
		{Start: codeBase + 0x1000, End: codeBase + codeSize, Offset: 0x1000, Path: m.Path, Perms: "r--p"},
	}
	const callee, call = 0x10200, codeBase + 0xffc
	f.call(call, callee)
	r := f.unwind(callee+0x10, regsOf(map[int]uint64{31: stackBase + 0x1000, 30: call + 4}), Options{NoScan: true})
	check(t, r,
		want{callee + 0x10, MethodContext, TrustHigh},
		want{call + 4, MethodLR, TrustMedium})
}

// musl's cancellable syscalls: __timedwait_cp calls __syscall_cp, which
// jumps on to __syscall_cp_c, laid out below it: the call's target is
// above the PC, yet the call led there. Call-site validation follows the
// jump a function begins with.
func TestCallReachesThroughTailJump(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const caller, inner, wrapper = 0x10100, 0x10400, 0x10800
	f.call(caller+0x10, wrapper)
	f.insn32(wrapper, 0xd2800002) // mov x2, #0
	f.insn32(wrapper+4, bA64(wrapper+4, inner))
	rs := regsOf(map[int]uint64{31: stackBase + 0x1000, 30: caller + 0x14})
	r := f.unwind(inner+0x10, rs, Options{NoScan: true})
	check(t, r,
		want{inner + 0x10, MethodContext, TrustHigh},
		want{caller + 0x14, MethodLR, TrustMedium})

	// A jump elsewhere does not reach the PC.
	f.insn32(wrapper+4, bA64(wrapper+4, caller))
	r = f.unwind(inner+0x10, rs, Options{NoScan: true})
	check(t, r, want{inner + 0x10, MethodContext, TrustHigh})
}

// A stripped static program names no function, but every direct call in
// its code names one: a return address whose call targets a function below
// another called one cannot reach the PC past it. Without that, a scan
// skipped musl's table-less frames straight to the program's.
func TestCallTargetsAreFunctionStarts(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const caller, a, b, other = 0x10100, 0x10400, 0x10600, 0x10900
	f.call(caller+0x10, a)
	rs := regsOf(map[int]uint64{31: stackBase + 0x1000, 30: caller + 0x14})
	f.withFile()
	r := f.unwind(b+0x10, rs, Options{NoScan: true})
	check(t, r,
		want{b + 0x10, MethodContext, TrustHigh},
		want{caller + 0x14, MethodLR, TrustMedium})

	// Some code calls b: b is a function, and a's callers cannot reach it.
	f = newFake(t, arch.AArch64)
	f.call(caller+0x10, a)
	f.call(other+0x10, b)
	f.withFile()
	r = f.unwind(b+0x10, rs, Options{NoScan: true})
	check(t, r, want{b + 0x10, MethodContext, TrustHigh})
	if !strings.Contains(r.Detail, "a call targets") {
		t.Errorf("detail %q does not name the call target", r.Detail)
	}
}

func bA64(at, target uint64) uint32 {
	return 0x14000000 | uint32((int64(target)-int64(at))/4)&0x03FFFFFF
}

// Offline, from a core's NT_FILE, a module's mappings carry no
// permissions until its file is loaded: the interrupted PC a scanned
// signal frame holds must be checked after loading the module it is in,
// or offline and live unwinds of the same crash differ.
func TestScannedSigframeLoadsTheModule(t *testing.T) {
	f := newFake(t, arch.X86_64)
	const handler, tramp = 0x10400, 0x12000
	const libBase, interrupted = 0x40000, 0x40124
	f.code(tramp, restoreRtX86...)
	lib := &module.Module{Path: "/lib/libc.so", Start: libBase, End: libBase + 0x1000,
		Maps: []module.Mapping{{Start: libBase, End: libBase + 0x1000, Path: "/lib/libc.so"}}}
	f.mods = append(f.mods, lib)
	sp := uint64(stackBase + 0x1000)
	slot := sp + 0x18
	f.word(slot, tramp)
	f.word(slot+8+0x28+120, sp+0x800) // rsp
	f.word(slot+8+0x28+128, interrupted)
	rs := regsOf(map[int]uint64{7: sp})
	loaded := false
	p := &Process{Arch: f.a, Modules: f.mods, Mem: f.mem, Load: func(m *module.Module) {
		if m == lib {
			m.Maps[0].Perms = "r-xp"
			loaded = true
		}
	}}
	r := Unwind(p, handler+0x10, rs, Options{})
	if len(r.Frames) < 3 || r.Frames[1].PC != tramp || r.Frames[2].PC != interrupted {
		logFrames(t, r)
		t.Errorf("want the restorer then the interrupted pc %#x (stop %s: %s)", uint64(interrupted), r.Stop, r.Detail)
	}
	if !loaded {
		t.Error("the interrupted pc's module was never loaded")
	}
}

// AArch64 saves {x29, x30} at the bottom of a frame: a scanned trampoline
// address gives no SP. The kernel points the handler's x29 at a record
// after the signal frame that repeats the interrupted x29 and x30
// (arch/arm64/kernel/signal.c, setup_return): when the handler's saved
// x29 beside the address leads there, the signal frame is placed. When it
// does not, the scan stops: the words above are the signal frame's saved
// registers, and a return address among them would skip frames.
func TestAArch64ScannedTrampolinePlacedByRecord(t *testing.T) {
	const tramp, handler, fn, caller, decoy = 0x12000, 0x10400, 0x10600, 0x10800, 0x10a00
	setup := func(agree bool) *fakeProc {
		f := newFake(t, arch.AArch64)
		f.code(tramp, restoreRtA64...)
		f.call(caller+0x10, fn)
		f.call(decoy+0x10, handler)
		sp := uint64(stackBase + 0x1000)
		sigSP := sp + 0x20
		rec := sigSP + 128 + 176 + 288 + 4096
		regs := sigSP + 128 + 176 + 8
		f.record(sp, rec, tramp) // the handler's saved x29 and x30
		f.word(sp+0x18, decoy+0x14)
		f.word(regs+29*8, sp+0x3000)
		f.word(regs+30*8, caller+0x14)
		f.word(regs+31*8, sp+0x2000)
		f.word(regs+32*8, fn+0x8)
		f.word(rec, sp+0x3000)
		lr := uint64(caller + 0x14)
		if !agree {
			lr = caller + 0x18
		}
		f.word(rec+8, lr)
		return f
	}
	rs := regsOf(map[int]uint64{31: stackBase + 0x1000})
	r := setup(true).unwind(handler+0x10, rs, Options{})
	checkFirst(t, r,
		want{handler + 0x10, MethodContext, TrustHigh},
		want{tramp, MethodScan, TrustLow},
		want{fn + 0x8, MethodSignal, TrustLow})

	r = setup(false).unwind(handler+0x10, rs, Options{})
	check(t, r, want{handler + 0x10, MethodContext, TrustHigh})
	if !strings.Contains(r.Detail, "does not repeat") {
		t.Errorf("detail %q", r.Detail)
	}
}

// AArch64, no tables: the function holding the PC made an indirect call
// earlier (blr), whose return address is left in its frame below the
// caller's. The call lies in the PC's own function, before the PC: the
// word is refused, and the scan goes on to the real return address. A
// direct call elsewhere names the function's start.
func TestScanRefusesOwnIndirectCall(t *testing.T) {
	f := newFake(t, arch.AArch64)
	const caller, fn, other = 0x10100, 0x10400, 0x10800
	f.call(caller+0x10, fn)
	f.call(other+0x10, fn)        // fn is called: a start
	f.insn32(fn+0x20, 0xD63F0060) // blr x3
	f.withFile()
	sp := uint64(stackBase + 0x1000)
	f.word(sp+0x10, fn+0x24)     // stale: fn's own indirect call
	f.word(sp+0x28, caller+0x14) // fn's return address
	rs := regsOf(map[int]uint64{31: sp})
	r := f.unwind(fn+0x40, rs, Options{})
	if len(r.Frames) < 2 || r.Frames[1].PC != caller+0x14 {
		logFrames(t, r)
		t.Errorf("frame 1 is not the caller %#x (stop %s: %s)", uint64(caller+0x14), r.Stop, r.Detail)
	}
}

// x86, no tables (musl's static programs built with
// -fno-asynchronous-unwind-tables): main was called through a pointer,
// and in its locals lies a stale return address after __libc_start_init's
// call through .init_array, which no check can reject. main's address is
// taken (_start_c hands it to __libc_start_main: lea main(%rip), PIE), its prologue pushes three
// registers and subtracts 0x20: the return address is at SP+0x38, and the
// scan takes that word over the stale one below it.
func TestX86ScanPrefersFrameSizeOverStaleIndirect(t *testing.T) {
	f := newFake(t, arch.X86_64)
	const start, main, initf, stage2 = 0x10100, 0x10200, 0x10400, 0x10600
	f.code(start, 0x48, 0x8d, 0x3d, main-start-7, (main-start-7)>>8, 0, 0) // lea main(%rip),%rdi
	f.code(main,
		0x41, 0x54, // push %r12
		0x55,       // push %rbp
		0x53,       // push %rbx
		0x89, 0xfb, // mov %edi,%ebx
		0x48, 0x83, 0xec, 0x20) // sub $0x20,%rsp
	f.code(main+0x10, 0x0f, 0x0b)   // ud2: the crash
	f.code(initf+0x10, 0xff, 0x13)  // call *(%rbx)
	f.code(stage2+0x10, 0xff, 0xd3) // call *%rbx
	f.withFile()
	sp := uint64(stackBase + 0x1000)
	f.word(sp+8, initf+0x12)     // stale
	f.word(sp+0x38, stage2+0x12) // main's return address
	rs := regsOf(map[int]uint64{arch.X86_64.SP: sp})
	r := f.unwind(main+0x10, rs, Options{})
	checkFirst(t, r,
		want{main + 0x10, MethodContext, TrustHigh},
		want{stage2 + 0x12, MethodScan, TrustLow})
}

// x86, no tables: the sweep of direct calls decodes the middle of
// instructions too (glibc's `mov %r13d,%eax; jmp …` reads as a call), and
// such a false target between a function's start and the PC made the scan
// refuse the live return address and take the next one up, skipping main.
// The call names the function, whose `sub $0x28,%rsp` puts the return
// address in the very slot it was found in: that confirms it.
func TestX86ScanFrameSizeOverridesFalseTarget(t *testing.T) {
	f := newFake(t, arch.X86_64)
	const main, threads, other, false_ = 0x10200, 0x10400, 0x10600, 0x10800
	f.call(main+0x10, threads)
	f.code(threads, 0x48, 0x83, 0xec, 0x28) // sub $0x28,%rsp
	f.code(threads+0x40, 0x0f, 0x0b)        // ud2: the crash
	// A call whose target falls between threads and the PC.
	f.call(false_, threads+0x20)
	f.code(other+0x10, 0xff, 0xd3) // call *%rbx: the next return address up
	f.withFile()
	sp := uint64(stackBase + 0x1000)
	f.word(sp+0x28, main+0x15)
	f.word(sp+0x38, other+0x12)
	rs := regsOf(map[int]uint64{arch.X86_64.SP: sp})
	r := f.unwind(threads+0x40, rs, Options{})
	checkFirst(t, r,
		want{threads + 0x40, MethodContext, TrustHigh},
		want{main + 0x15, MethodScan, TrustLow})
}
