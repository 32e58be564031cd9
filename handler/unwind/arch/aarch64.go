package arch

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/handler/elf"
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
	PRStatus:     seq(0, 32),
	PRStatusCPSR: -1,
	PRStatusPC:   32,
	PRStatusMin:  33,
	// AAPCS64 §6.2.3: the frame record {x29, x30} sits at x29, at the
	// bottom of the frame: the caller's SP is above it, how far unknown.
	FrameRecords: []FrameRecord{{Name: "aapcs64", PrevFP: 0, RA: 8, CallerSP: 16}},
	Call:         callAArch64,
	PLT:          pltAArch64,
	Strategies:   []string{"signal", "cfi", "lr", "fp", "scan"},
	MinInsn:      4,
	Sigreturns: []Sigreturn{{
		// vDSO __kernel_rt_sigreturn: mov x8, #139; svc #0
		// (arch/arm64/kernel/vdso/sigreturn.S). SP points at struct
		// rt_sigframe: siginfo (128) then ucontext, whose uc_mcontext is at
		// 176 (16-byte aligned after uc_sigmask and the 120-byte pad);
		// sigcontext starts with fault_address, then regs[31], sp, pc.
		Name:   "__kernel_rt_sigreturn",
		Code:   le32(0xd2801168, 0xd4000001),
		Regs:   128 + 176 + 8,
		Slots:  append(slots(0, 31, 0), Slot{a64SP, 31 * 8}),
		PCSlot: 32 * 8,
	}},
	PACStrip: true,
}

func seq(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}

// slots returns n consecutive pointer-sized slots for DWARF registers
// first, first+1, … starting at offset off.
func slots(first, n int, off int64) []Slot {
	s := make([]Slot, n)
	for i := range s {
		s[i] = Slot{first + i, off + int64(i)*8}
	}
	return s
}

func le32(words ...uint32) []byte {
	b := make([]byte, 0, 4*len(words))
	for _, w := range words {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}
