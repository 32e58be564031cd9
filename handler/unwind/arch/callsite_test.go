package arch

import (
	"testing"

	"github.com/unwound-dev/unwound/testkit/le"
)

// Encodings taken from objdump of the crash fixtures and Debian binaries:
// each call ends at ra, "before" holds the bytes up to ra.
func TestCallBefore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dec    CallBefore
		before []byte
		ra     uint64
		thumb  bool
		ok     bool
		direct bool
		target uint64
		size   int
	}{
		{"a64 bl forward", callAArch64, le.W32(0x940000f0), 0x8b8, false, true, true, 0xc74, 4},
		{"a64 bl back", callAArch64, le.W32(0x97ffffd8), 0xa14, false, true, true, 0x970, 4},
		{"a64 blr x8", callAArch64, le.W32(0xd63f0100), 0x1004, false, true, false, 0, 4},
		{"a64 blraa x8, x9", callAArch64, le.W32(0xd73f0909), 0x1004, false, true, false, 0, 4},
		{"a64 blraaz x8", callAArch64, le.W32(0xd63f091f), 0x1004, false, true, false, 0, 4},
		{"a64 br x8 is no call", callAArch64, le.W32(0xd61f0100), 0x1004, false, false, false, 0, 0},
		{"a64 b is no call", callAArch64, le.W32(0x17ffffd8), 0xa14, false, false, false, 0, 0},
		{"a32 bl", callARM, le.W32(0xeb0000a0), 0x544, false, true, true, 0x7c8, 4},
		{"a32 bl back", callARM, le.W32(0xebfffff4), 0x624, false, true, true, 0x5f8, 4},
		{"a32 blx r3", callARM, le.W32(0xe12fff33), 0x1004, false, true, false, 0, 4},
		{"a32 b is no call", callARM, le.W32(0xeafffff4), 0x624, false, false, false, 0, 0},
		{"thumb bl", callARM, le.H16(0xf7ff, 0xfff4), 0x628, true, true, true, 0x610, 4},
		{"thumb blx to arm", callARM, le.H16(0xf7ff, 0xefee), 0x61c, true, true, true, 0x5f8, 4},
		{"thumb blx r3", callARM, le.H16(0x4798), 0x972, true, true, false, 0, 2},
		{"thumb bx lr is no call", callARM, le.H16(0x4770), 0x972, true, false, false, 0, 0},
		{"rv jal ra", callRISCV, le.W32(0xf65ff0ef), 0x940, false, true, true, 0x8a0, 4},
		{"rv jal ra forward", callRISCV, le.W32(0x010000ef), 0x1004, false, true, true, 0x1010, 4},
		{"rv jalr ra, a5", callRISCV, le.W32(0x000780e7), 0x1004, false, true, false, 0, 4},
		{"rv c.jalr a5", callRISCV, le.H16(0x9782), 0x1002, false, true, false, 0, 2},
		{"rv jalr t1 (plt) is no call", callRISCV, le.W32(0x000e0367), 0x86c, false, false, false, 0, 0},
		{"rv jal t0 (millicode) is no call", callRISCV, le.W32(0x010002ef), 0x1004, false, false, false, 0, 0},
		{"x86 call rel32", callX86, []byte{0xe8, 0x34, 0xff, 0xff, 0xff}, 0x110c, false, true, true, 0x1040, 5},
		{"x86 call *%rax", callX86, []byte{0xff, 0xd0}, 0x1012, false, true, false, 0, 2},
		{"x86 call *%r14", callX86, []byte{0x41, 0xff, 0xd6}, 0xe3a0, false, true, false, 0, 3},
		{"x86 call *0x30(%r12)", callX86, []byte{0x41, 0xff, 0x54, 0x24, 0x30}, 0xfc40, false, true, false, 0, 5},
		{"x86 call *rel(%rip)", callX86, []byte{0xff, 0x15, 0x9f, 0xdd, 0x01, 0x00}, 0x61f1, false, true, false, 0, 6},
		{"x86 jmp *%rax is no call", callX86, []byte{0xff, 0xe0}, 0x1012, false, false, false, 0, 0},
		{"x86 too short", callX86, []byte{0xd0}, 0x1012, false, false, false, 0, 0},
	} {
		c, ok := tc.dec(tc.before, tc.ra, tc.thumb)
		if ok != tc.ok || (ok && (c.Direct != tc.direct || c.Target != tc.target || c.Size != tc.size)) {
			t.Errorf("%s: %+v %v, want ok=%v direct=%v target=%#x size=%d", tc.name, c, ok, tc.ok, tc.direct, tc.target, tc.size)
		}
	}
}

func TestPLT(t *testing.T) {
	for _, tc := range []struct {
		name string
		plt  func([]byte) bool
		code []byte
		want bool
	}{
		{"a64 adrp x16", pltAArch64, le.W32(0x90000090, 0xf9400a11), true},
		{"a64 stp", pltAArch64, le.W32(0xa9bf7bfd), false},
		{"arm add ip, pc", pltARM, le.W32(0xe28fc600, 0xe28cca10), true},
		{"thumb bx pc", pltARM, le.H16(0x4778, 0x46c0), true},
		{"arm push", pltARM, le.W32(0xe92d4010), false},
		{"arm mold", pltARM, le.W32(0xe59fc004, 0xe08cc00f, 0xe59cf000), true},
		{"arm mold cut short", pltARM, le.W32(0xe59fc004, 0xe08cc00f), false},
		{"arm ldr ip, [pc] in code", pltARM, le.W32(0xe59fc004, 0xe08cc00f, 0xe12fff1c), false},
		{"rv auipc t3", pltRISCV, le.W32(0x00002e17), true},
		{"rv addi sp", pltRISCV, le.W32(0xff010113), false},
		{"x86 jmp *rel(%rip)", pltX86, []byte{0xff, 0x25, 0, 0, 0, 0}, true},
		{"x86 endbr64; bnd jmp", pltX86, []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0, 0}, true},
		{"x86 push %rbp", pltX86, []byte{0x55, 0x48, 0x89, 0xe5}, false},
	} {
		if got := tc.plt(tc.code); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A function that only passes its arguments on starts with a few
// instructions and a direct jump: musl's pthread_cond_wait (AArch64: mov
// x2, #0; b pthread_cond_timedwait), __syscall_cp (b sccp).
func TestTailBranch(t *testing.T) {
	pad := func(b []byte) []byte { return append(b, make([]byte, MaxTailCode)...)[:MaxTailCode] }
	for _, tc := range []struct {
		name   string
		dec    func([]byte, uint64) (uint64, bool)
		code   []byte
		ok     bool
		target uint64
	}{
		{"a64 mov; b", tailAArch64, le.W32(0xd2800002, 0x14000040), true, 0x1104},
		{"a64 b back", tailAArch64, le.W32(0x17fffff0), true, 0x1000 - 0x40},
		{"a64 bl first", tailAArch64, le.W32(0x94000040, 0x14000040), false, 0},
		{"a64 ret first", tailAArch64, le.W32(0xd65f03c0, 0x14000040), false, 0},
		{"a64 no jump", tailAArch64, le.W32(0xd2800002, 0xd2800003, 0xd2800004, 0xd2800005), false, 0},
		{"rv c.li; j", tailRISCV, append(le.H16(0x4601), le.W32(0x0200006f)...), true, 0x1022},
		{"rv c.j", tailRISCV, le.H16(0xa801), true, 0x1010},
		{"rv jal ra first", tailRISCV, le.W32(0x000000ef, 0x0200006f), false, 0},
		{"rv c.jr first", tailRISCV, le.H16(0x8082, 0xa801), false, 0},
		{"x86 xor; jmp", tailX86, []byte{0x31, 0xd2, 0xe9, 0x00, 0x01, 0x00, 0x00}, true, 0x1107},
		{"x86 endbr64; jmp rel8", tailX86, []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xeb, 0x10}, true, 0x1016},
		{"x86 rex mov; jmp", tailX86, []byte{0x48, 0x89, 0xf7, 0xeb, 0xfe}, true, 0x1003},
		{"x86 push first", tailX86, []byte{0x55, 0xe9, 0, 0, 0, 0}, false, 0},
		{"x86 mov from memory", tailX86, []byte{0x8b, 0x07, 0xe9, 0, 0, 0, 0}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.dec(pad(tc.code), 0x1000)
			if ok != tc.ok || ok && got != tc.target {
				t.Errorf("%#x, %v; want %#x, %v", got, ok, tc.target, tc.ok)
			}
		})
	}
}

// Functions that end, straight through calls, in a jump through a
// register, and ones that return or branch first. The Thumb sequence is
// musl's __libc_start_main on armhf (objdump of the matrix's static musl
// program): it calls __init_libc, then bx r3 to libc_start_main_stage2.
func TestTailIndirect(t *testing.T) {
	for _, c := range []struct {
		name  string
		code  []byte
		thumb bool
		want  bool
	}{
		{"musl __libc_start_main", le.H16(0x1c4b, 0xb570, 0x460d, 0x4606, 0x6811, 0xeb02, 0x0083, 0x4614, 0xf7ff, 0xff10, 0x4b03, 0x4622, 0x4629, 0x447b, 0x4630, 0xe8bd, 0x4070, 0x4718), true, true},
		{"thumb bx lr", le.H16(0xb510, 0xf7ff, 0xff10, 0xe8bd, 0x4010, 0x4770), true, false},
		{"thumb pop pc", le.H16(0xb510, 0xf7ff, 0xff10, 0xbd10, 0x4718), true, false},
		{"thumb cbz first", le.H16(0xb118, 0x4718), true, false},
		{"thumb it", le.H16(0xbf08, 0x4718), true, false},
		{"a32 bx r3 after a call", le.W32(0xe92d4010, 0xebfffffe, 0xe8bd4010, 0xe12fff13), false, true},
		{"a32 bx lr", le.W32(0xe92d4010, 0xebfffffe, 0xe8bd4010, 0xe12fff1e), false, false},
		{"a32 pop pc", le.W32(0xe92d4010, 0xe8bd8010, 0xe12fff13), false, false},
		{"a32 conditional bx", le.W32(0x012fff13), false, false},
		{"cut short", le.H16(0xb510), true, false},
	} {
		if got := tailIndirectARM(c.code, c.thumb); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
