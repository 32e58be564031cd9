package arch

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// AArch64 DWARF numbers (AADWARF64 §4.1): x0–x30 are 0–30, sp is 31.
const (
	a64FP = 29
	a64LR = 30
	a64SP = 31
)

// AArch64 is the 64-bit ARM architecture.
var AArch64 = &Arch{
	Name:    "aarch64",
	Machine: elf.EM_AARCH64,
	Class:   elf.ELFCLASS64,
	PtrSize: 8,
	Order:   binary.LittleEndian,
	SP:      a64SP,
	FP:      a64FP,
	LR:      a64LR,
	RA:      a64LR,
	// struct user_pt_regs: regs[31], sp, pc, pstate.
	PRStatus:     []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31},
	PRStatusCPSR: -1,
	PRStatusPC:   32,
	PRStatusMin:  33,
	// AAPCS64 §6.2.3: the frame record {x29, x30} sits at x29, at the
	// bottom of the frame: the caller's SP is above it, how far unknown.
	FrameRecords: []FrameRecord{{Name: "aapcs64", PrevFP: 0, RA: 8, CallerSP: 16}},
	Call:         callAArch64,
	PLT:          pltAArch64,
	CallTargets:  sweepAArch64,
	TailBranch:   tailAArch64,
	PLTHeader:    32, // stp x16, x30, [sp, #-16]!; …
	Prologue: func(code []byte, start, pc uint64, _ bool) (*prologue.Frame, error) {
		return prologue.AArch64(code, start, pc)
	},
	Strategies: []Strategy{Signal, PLT, CFI, Prologue, LR, FP, Scan},
	MinInsn:    4,
	Sigreturns: []Sigreturn{{
		// vDSO __kernel_rt_sigreturn: mov x8, #139; svc #0
		// (arch/arm64/kernel/vdso/sigreturn.S). SP points at struct
		// rt_sigframe: siginfo (128) then ucontext, whose uc_mcontext is at
		// 176 (16-byte aligned after uc_sigmask and the 120-byte pad);
		// sigcontext starts with fault_address, then regs[31], sp, pc.
		Name:   "__kernel_rt_sigreturn",
		Code:   []byte{0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4}, // mov x8, #139; svc #0
		Regs:   128 + 176 + 8,
		Slots:  []Slot{{0, 0}, {1, 8}, {2, 16}, {3, 24}, {4, 32}, {5, 40}, {6, 48}, {7, 56}, {8, 64}, {9, 72}, {10, 80}, {11, 88}, {12, 96}, {13, 104}, {14, 112}, {15, 120}, {16, 128}, {17, 136}, {18, 144}, {19, 152}, {20, 160}, {21, 168}, {22, 176}, {23, 184}, {24, 192}, {25, 200}, {26, 208}, {27, 216}, {28, 224}, {29, 232}, {30, 240}, {31, 248}}, // x0–x30, then sp
		PCSlot: 32 * 8,
		// setup_return() points x29 at user->next_frame, the {fp, lr}
		// record after struct rt_sigframe: siginfo (128) and a ucontext
		// of 4560 bytes (uc_mcontext at 176: fault_address, regs[31],
		// sp, pc, pstate, then __reserved[4096] at 16-byte alignment).
		// Kernels place extra context (large SVE state) further on; the
		// record then is not found and the scan refuses the address.
		NextRecord: 128 + 176 + 288 + 4096,
		// sigcontext's __reserved (after pstate, 16-byte aligned) starts
		// with the FP/SIMD record: FPSIMD_MAGIC, size 528
		// (arch/arm64/kernel/signal.c, get_sigframe and setup_return).
		Records:     128 + 176 + 288,
		FirstRecord: 0x46508001 | 0x210<<32,
	}},
	PACStrip: true,
}
