package arch

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/handler/elf"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// RISC-V DWARF numbers (RISC-V ELF psABI, "DWARF register numbers"):
// x0–x31 are 0–31; ra is x1, sp x2, s0/fp x8.
const (
	rvRA = 1
	rvSP = 2
	rvFP = 8
)

// RISCV64 is the 64-bit RISC-V architecture.
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
	PRStatus:     append([]int{-1}, seq(1, 31)...),
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
	Call:       callRISCV,
	RASlotTop:  true,
	PLT:        pltRISCV,
	Strategies: []string{"signal", "cfi", "prologue", "lr", "fp", "scan"},
	MinInsn:    2,
	Prologue: func(code []byte, start, pc uint64, _ bool) (*prologue.Frame, error) {
		return prologue.RISCV(code, start, pc)
	},
	Sigreturns: []Sigreturn{{
		// vDSO __vdso_rt_sigreturn: li a7, 139; ecall
		// (arch/riscv/kernel/vdso/rt_sigreturn.S). SP points at struct
		// rt_sigframe: siginfo (128), then ucontext with uc_mcontext at 176;
		// sc_regs is struct user_regs_struct: pc, x1–x31.
		Name:   "__vdso_rt_sigreturn",
		Code:   le32(0x08b00893, 0x00000073),
		Regs:   128 + 176,
		Slots:  slots(1, 31, 8),
		PCSlot: 0,
	}},
}
