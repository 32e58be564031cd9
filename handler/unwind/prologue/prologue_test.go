package prologue

import (
	"errors"
	"testing"

	"github.com/unwound-dev/unwound/testkit/le"
)

func TestThumb(t *testing.T) {
	// glibc armhf abort: ldr…; push {r7, lr}; add r0, pc; ldr; sub sp, #144
	code := le.H16(0x4b4e, 0xf5a4, 0x64a0, 0x447a, 0x484d, 0xb580, 0x4478, 0x58d3, 0xb0a4, 0x681b)
	f, err := ARM(code, 0x1000, 0x1000+uint64(len(code)), true)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != 8+144 || f.Saved[14] != -4 || f.Saved[7] != -8 {
		t.Errorf("size %d saved %v", f.Size, f.Saved)
	}
	// Stopping before the sub: only the push has happened.
	f, _ = ARM(code, 0x1000, 0x1000+16, true)
	if f.Size != 8 {
		t.Errorf("at the push: size %d", f.Size)
	}
	// push.w {r4-r11, lr}; sub.w sp, sp, #0x100; vpush {d8-d9}
	code = le.H16(0xe92d, 0x4ff0, 0xf5ad, 0x7d80, 0xed2d, 0x8b04)
	f, err = ARM(code, 0, 12, true)
	if err != nil || f.Size != 36+256+16 || f.Saved[14] != -4 || f.Saved[4] != -36 {
		t.Errorf("push.w/sub.w/vpush: %v %+v", err, f)
	}
}

func TestARMMode(t *testing.T) {
	// push {r4, r11, lr}; sub sp, sp, #16
	code := le.W32(0xe92d4810, 0xe24dd010)
	f, err := ARM(code, 0, 8, false)
	if err != nil || f.Size != 12+16 || f.Saved[14] != -4 || f.Saved[11] != -8 || f.Saved[4] != -12 {
		t.Errorf("%v %+v", err, f)
	}
}

func TestWrongStartIsRefused(t *testing.T) {
	// The end of an earlier function (pop {r7, pc}) before our push.
	code := le.H16(0xbd80, 0xb580, 0xb082)
	if _, err := ARM(code, 0, 6, true); !errors.Is(err, ErrWrongStart) {
		t.Errorf("thumb: %v", err)
	}
	if _, err := RISCV(le.H16(0x8082, 0x1141), 0, 4); !errors.Is(err, ErrWrongStart) {
		t.Errorf("riscv: %v", err)
	}
	if _, err := ARM(le.H16(0x4770), 0, 2, true); !errors.Is(err, ErrWrongStart) {
		t.Errorf("bx lr: %v", err)
	}
}

// The code between a function's start and the PC is not a straight line:
// an epilogue and a return in the middle of a function, or an early return
// before the frame setup (GCC's shrink-wrapping), end one path, and the
// code after them is reached by a branch with that branch's frame.
// (Assembled with binutils; the first is the shape of the riscv64 crash
// fixture's main at -O2.)
func TestPathsPastAReturn(t *testing.T) {
	// f1: c.addi16sp -208; c.sdsp s0,192; c.sdsp ra,200; c.sdsp s1,184;
	// bge a5,a0,.L1; c.ldsp ra; c.ldsp s0; c.ldsp s1; c.addi16sp 208;
	// ret; .L1: nop
	f1 := append(le.H16(0x7155, 0xe1a2, 0xe586, 0xfd26), le.W32(0x00a7d763)...)
	f1 = append(f1, le.H16(0x60ae, 0x640e, 0x74ea, 0x6169, 0x8082, 0x0001)...)
	f, err := RISCV(f1, 0x1000, 0x1016)
	if err != nil || f.Size != 208 || f.Saved[1] != -8 || f.Saved[8] != -16 || f.Saved[9] != -24 {
		t.Errorf("after the mid-function return: %v %+v", err, f)
	}
	// In the epilogue, after ra's reload: ra holds the return address.
	f, err = RISCV(f1, 0x1000, 0x100e)
	if err != nil || f.Size != 208 || hasReg(f, 1) || f.Saved[8] != -16 {
		t.Errorf("in the epilogue: %v %+v", err, f)
	}
	// f2: c.beqz a0,.L2; li a0,0; ret; .L2: addi sp,-32; sd ra,24(sp); nop
	f2 := le.H16(0xc119, 0x4501, 0x8082, 0x1101, 0xec06, 0x0001)
	f, err = RISCV(f2, 0, 10)
	if err != nil || f.Size != 32 || f.Saved[1] != -8 {
		t.Errorf("shrink-wrapped: %v %+v", err, f)
	}
	if _, err := RISCV(f2, 0, 6); !errors.Is(err, ErrNoPrologue) {
		t.Errorf("shrink-wrapped, at the branch target: %v", err)
	}
	// Uncompressed: addi sp,-208; sd ra,200(sp); blt a5,a0,.L1;
	// ld ra,200(sp); addi sp,208; jr t1 (a tail call); j .L2; .L1: nop;
	// .L2: nop
	f3 := le.W32(0xf3010113, 0x0c113423, 0x00a7ca63, 0x0c813083, 0x0d010113, 0x00030067, 0x0080006f, 0x13, 0x13)
	for _, pc := range []uint64{0x1c, 0x20} {
		f, err = RISCV(f3, 0, pc)
		if err != nil || f.Size != 208 || f.Saved[1] != -8 {
			t.Errorf("uncompressed, pc %#x: %v %+v", pc, err, f)
		}
	}
	// Thumb: cbz r0,1f; bx lr; 1: push {r4, r7, lr}; sub sp,#16; cmp r0,#1;
	// it eq; popeq {r4, r7, pc}; bne.w 2f; add sp,#16; pop {r4, r7, pc};
	// 2: nop
	th := le.H16(0xb100, 0x4770, 0xb590, 0xb084, 0x2801, 0xbf08, 0xbd90, 0xf040, 0x8002, 0xb004, 0xbd90, 0xbf00)
	f, err = ARM(th, 0, 0x16, true)
	if err != nil || f.Size != 28 || f.Saved[14] != -4 || f.Saved[7] != -8 || f.Saved[4] != -12 {
		t.Errorf("thumb: %v %+v", err, f)
	}
	f, err = ARM(th, 0, 0x14, true)
	if err != nil || f.Size != 12 {
		t.Errorf("thumb, before the final pop: %v %+v", err, f)
	}
	// A32: push {r4, fp, lr}; sub sp,#16; cmp r0,#0; bne 1f; add sp,#16;
	// pop {r4, fp, pc}; 1: nop
	a := le.W32(0xe92d4810, 0xe24dd010, 0xe3500000, 0x1a000001, 0xe28dd010, 0xe8bd8810, 0xe320f000)
	f, err = ARM(a, 0, 0x18, false)
	if err != nil || f.Size != 28 || f.Saved[14] != -4 {
		t.Errorf("a32: %v %+v", err, f)
	}
}

// alloca and variable-length arrays move SP by a computed amount: the CFA
// comes from the frame pointer the function set up before (the crash
// fixture's with_alloca at -O2, Thumb-2 and A32).
func TestDynamicFrame(t *testing.T) {
	regs := func(r7, r11 uint64) func(int) (uint64, bool) {
		return func(r int) (uint64, bool) {
			switch r {
			case 7:
				return r7, true
			case 11:
				return r11, true
			}
			return 0, false
		}
	}
	// push {r3-r7, lr}; adds r5, r0, #7; bic.w r3, r5, #7; add r7, sp, #0;
	// sub.w sp, sp, r3; mov r3, sp
	th := le.H16(0xb5f8, 0x1dc5, 0xf025, 0x0307, 0xaf00, 0xebad, 0x0d03, 0x466b)
	f, err := ARM(th, 0, 16, true)
	if err != nil || !f.Dynamic || f.Saved[14] != -4 || f.Saved[7] != -8 {
		t.Fatalf("thumb: %v %+v", err, f)
	}
	if cfa, err := f.CFA(0x1000, regs(0x2000, 0)); err != nil || cfa != 0x2000+24 {
		t.Errorf("thumb: CFA %#x %v, want r7+24", cfa, err)
	}
	// Before the sub.w, SP still gives the CFA.
	f, _ = ARM(th, 0, 10, true)
	if cfa, _ := f.CFA(0x1000, regs(0x1000, 0)); f.Dynamic || cfa != 0x1000+24 {
		t.Errorf("thumb, before the alloca: %+v", f)
	}
	// ...; mov sp, r7 undoes it: then SP = r7.
	th2 := append(append([]byte(nil), th...), le.H16(0x46bd, 0xbdf8)...)
	f, _ = ARM(th2, 0, 18, true)
	if f.Dynamic || f.Size != 24 {
		t.Errorf("thumb, after mov sp, r7: %+v", f)
	}
	// push {r4-r7, fp, lr}; add r5, r0, #7; bic r3, r5, #7; add fp, sp, #20;
	// sub sp, sp, r3; mov r3, sp
	a := le.W32(0xe92d48f0, 0xe2805007, 0xe3c53007, 0xe28db014, 0xe04dd003, 0xe1a0300d)
	f, err = ARM(a, 0, 24, false)
	if err != nil || !f.Dynamic || f.Saved[14] != -4 || f.Saved[11] != -8 {
		t.Fatalf("a32: %v %+v", err, f)
	}
	if cfa, err := f.CFA(0x1000, regs(0, 0x2000)); err != nil || cfa != 0x2000+4 {
		t.Errorf("a32: CFA %#x %v, want fp+4", cfa, err)
	}
	// A computed SP without a frame pointer: no CFA.
	f, err = ARM(le.H16(0xb580, 0xebad, 0x0d03), 0, 6, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.CFA(0x1000, regs(0, 0)); err == nil {
		t.Errorf("no frame pointer: a CFA from %+v", f)
	}
}

func hasReg(f *Frame, r int) bool {
	_, ok := f.Saved[r]
	return ok
}

func TestRISCV(t *testing.T) {
	// c.addi16sp sp, -64; c.sdsp ra, 56(sp); c.sdsp s0, 48(sp)
	code := le.H16(0x7139, 0xfc06, 0xf822)
	f, err := RISCV(code, 0, 6)
	if err != nil || f.Size != 64 || f.Saved[1] != -8 || f.Saved[8] != -16 {
		t.Errorf("compressed: %v %+v", err, f)
	}
	// addi sp, sp, -2032; sd ra, 2024(sp)
	code = le.W32(0x81010113, 0x7e113423)
	f, err = RISCV(code, 0, 8)
	if err != nil || f.Size != 2032 || f.Saved[1] != -8 {
		t.Errorf("full-size: %v %+v", err, f)
	}
	if _, err := RISCV(le.H16(0x0001), 0, 2); !errors.Is(err, ErrNoPrologue) {
		t.Errorf("no prologue: %v", err)
	}
}

func FuzzAnalyzers(f *testing.F) {
	f.Add(le.H16(0xb580, 0xb0a4), true)
	f.Add(le.W32(0xe92d4810, 0xe24dd010), false)
	f.Add(le.H16(0x7139, 0xfc06), true)
	f.Add(le.H16(0xb5f8, 0x1dc5, 0xf025, 0x0307, 0xaf00, 0xebad, 0x0d03, 0x466b, 0x46bd, 0xbdf8), true)
	f.Add(le.H16(0xc119, 0x4501, 0x8082, 0x1101, 0xec06, 0x0001), false)
	f.Add(le.H16(0xb100, 0x4770, 0xb590, 0xb084, 0x2801, 0xbf08, 0xbd90, 0xf040, 0x8002, 0xb004, 0xbd90, 0xbf00), true)
	// A64: stp x29, x30, [sp, #-48]!; mov x29, sp; mov x12, #8576;
	// sub sp, sp, x12; bl; ldp x29, x30, [sp], #48; ret
	f.Add(le.W32(0xa9bd7bfd, 0x910003fd, 0xd284300c, 0xcb2c63ff, 0x94000010, 0xa8c37bfd, 0xd65f03c0), false)
	f.Fuzz(func(t *testing.T, code []byte, thumb bool) {
		ARM(code, 0, uint64(len(code)), thumb)
		RISCV(code, 0, uint64(len(code)))
		AArch64(code, 0, uint64(len(code)))
	})
}

func TestAArch64(t *testing.T) {
	// stp x29, x30, [sp, #-48]!; mov x29, sp; stp x19, x20, [sp, #16]
	code := le.W32(0xa9bd7bfd, 0x910003fd, 0xa90153f3)
	f, err := AArch64(code, 0, 12)
	if err != nil || f.Size != 48 || f.Saved[29] != -48 || f.Saved[30] != -40 || f.Saved[19] != -32 || f.Saved[20] != -24 {
		t.Errorf("frame record: %v %+v", err, f)
	}
	// A large frame: mov x12, #8576; sub sp, sp, x12; stp x29, x30, [sp]
	code = le.W32(0xd284300c, 0xcb2c63ff, 0xa9007bfd)
	f, err = AArch64(code, 0, 12)
	if err != nil || f.Size != 8576 || f.Dynamic || f.Saved[30] != -8568 {
		t.Errorf("large frame: %v %+v", err, f)
	}
	// sub sp, sp, x0 (alloca) before a frame pointer: not a leaf.
	if _, err := AArch64(le.W32(0xcb2063ff), 0, 4); errors.Is(err, ErrNoPrologue) {
		t.Errorf("alloca: %v, want no leaf", err)
	}
	// A leaf: add w0, w0, #1 before the PC.
	if _, err := AArch64(le.W32(0x11000400), 0, 4); !errors.Is(err, ErrNoPrologue) {
		t.Errorf("leaf: %v", err)
	}
	// ret before the PC, nothing branching past it: not this function's start.
	if _, err := AArch64(le.W32(0xd65f03c0, 0xa9bf7bfd), 0, 8); !errors.Is(err, ErrWrongStart) {
		t.Errorf("wrong start: %v", err)
	}
}
