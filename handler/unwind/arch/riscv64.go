package arch

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// RISC-V DWARF numbers (RISC-V ELF psABI, "DWARF register numbers"):
// x0–x31 are 0–31; ra is x1, sp x2, s0/fp x8.
const (
	rvRA = 1
	rvSP = 2
	rvFP = 8
)

// RISCV64 is the 64-bit RISC-V architecture. Its literal repeats the shape
// of AArch64's on purpose: each architecture's facts are data in its own file.
var RISCV64 = &Arch{
	Name:    "riscv64",
	Machine: elf.EM_RISCV,
	Class:   elf.ELFCLASS64,
	PtrSize: 8,
	Order:   binary.LittleEndian,
	SP:      rvSP,
	FP:      rvFP,
	LR:      rvRA,
	RA:      rvRA,
	// struct user_regs_struct: pc, then x1–x31.
	PRStatus:     []int{-1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31},
	PRStatusCPSR: -1,
	PRStatusPC:   0,
	PRStatusMin:  32,
	// With -fno-omit-frame-pointer, s0 is the CFA (the caller's SP): a
	// non-leaf function saves ra at fp-8 and the previous fp at fp-16; a
	// leaf saves only the previous fp, at fp-8, and keeps ra in ra.
	FrameRecords: []FrameRecord{
		{Name: "riscv", PrevFP: -16, RA: -8, CallerSP: 0, SPExact: true},
		{Name: "riscv-leaf", PrevFP: -8, CallerSP: 0, SPExact: true, Leaf: true},
	},
	Call:        callRISCV,
	RASlotTop:   true,
	PLT:         pltRISCV,
	CallTargets: sweepRISCV,
	TailBranch:  tailRISCV,
	PLTHeader:   32, // uses t0-t3 only, but is no stub
	Strategies:  []Strategy{Signal, PLT, CFI, Prologue, LR, FP, Scan},
	MinInsn:     2,
	Prologue: func(code []byte, start, pc uint64, _ bool) (*prologue.Frame, error) {
		return prologue.RISCV(code, start, pc)
	},
	Sigreturns: []Sigreturn{{
		// vDSO __vdso_rt_sigreturn: li a7, 139; ecall
		// (arch/riscv/kernel/vdso/rt_sigreturn.S). SP points at struct
		// rt_sigframe: siginfo (128), then ucontext with uc_mcontext at 176;
		// sc_regs is struct user_regs_struct: pc, x1–x31.
		Name:   "__vdso_rt_sigreturn",
		Code:   []byte{0x93, 0x08, 0xb0, 0x08, 0x73, 0x00, 0x00, 0x00}, // li a7, 139; ecall
		Regs:   128 + 176,
		Slots:  []Slot{{1, 8}, {2, 16}, {3, 24}, {4, 32}, {5, 40}, {6, 48}, {7, 56}, {8, 64}, {9, 72}, {10, 80}, {11, 88}, {12, 96}, {13, 104}, {14, 112}, {15, 120}, {16, 128}, {17, 136}, {18, 144}, {19, 152}, {20, 160}, {21, 168}, {22, 176}, {23, 184}, {24, 192}, {25, 200}, {26, 208}, {27, 216}, {28, 224}, {29, 232}, {30, 240}, {31, 248}},
		PCSlot: 0,
	}},
}
