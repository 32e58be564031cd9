package arch

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// ARM DWARF numbers (ARM DWARF ABI §4.1): r0–r15 are 0–15.
const (
	armFP = 11
	armSP = 13
	armLR = 14
	armPC = 15
)

// ARM signal frames (arch/arm/kernel/signal.c): struct rt_sigframe is
// siginfo (128 bytes) then a ucontext whose uc_mcontext (at 20) is struct
// sigcontext: trap_no, error_code, oldmask, then r0–r15 and cpsr. struct
// sigframe (non-rt) starts with the ucontext.
const (
	armRTRegs = 128 + 20 + 12
	armRegs   = 20 + 12
)

// armSlots maps r0–r15 to their places in struct sigcontext's
// register block.
var armSlots = []Slot{{0, 0}, {1, 4}, {2, 8}, {3, 12}, {4, 16}, {5, 20}, {6, 24}, {7, 28}, {8, 32}, {9, 36}, {10, 40}, {11, 44}, {12, 48}, {13, 52}, {14, 56}, {15, 60}}

// ARM is 32-bit ARM (ARM and Thumb state).
var ARM = &Arch{
	Name:    "arm",
	Machine: elf.EM_ARM,
	Class:   elf.ELFCLASS32,
	PtrSize: 4,
	Order:   binary.LittleEndian,
	SP:      armSP,
	FP:      armFP,
	LR:      armLR,
	RA:      armLR,
	// struct pt_regs: r0–r15, cpsr, orig_r0.
	PRStatus:    []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
	PRStatusPC:  armPC,
	PRStatusMin: 17,
	// GCC's A32 -fno-omit-frame-pointer frame: push {fp, lr}; add fp, sp,
	// #4, so lr is at [fp], the previous fp at [fp-4] and the caller's SP
	// is fp+4. The APCS frame (-mapcs-frame): mov ip, sp; push {fp, ip,
	// lr, pc}; sub fp, ip, #4, so fp points at the saved pc, lr at [fp-4],
	// the previous fp at [fp-12]. Thumb's r7 points below the locals: not
	// walkable.
	FrameRecords: []FrameRecord{
		{Name: "gcc", PrevFP: -4, RA: 0, CallerSP: 4, SPExact: true},
		{Name: "apcs", PrevFP: -12, RA: -4, CallerSP: 4, SPExact: true},
	},
	ThumbNoFP:    true,
	RASlotTop:    true,
	Call:         callARM,
	PLT:          pltARM,
	CallTargets:  sweepARM,
	TailIndirect: tailIndirectARM,
	PLTHeader:    32, // str lr, [sp, #-4]!; … (GNU ld 20 bytes, lld 32)
	Strategies:   []Strategy{Signal, PLT, CFI, EHABI, Prologue, LR, FP, Scan},
	MinInsn:      2,
	ThumbBit:     true,
	Prologue:     prologue.ARM,
	PRStatusCPSR: 16,
	// The kernel's [sigpage] codes (arch/arm/kernel/sigreturn_codes.S) in
	// ARM and Thumb state, rt and not, then the restorers glibc and musl
	// install (mov r7, #nr; svc 0). musl's carry no unwind information:
	// matching the bytes is the only way across them.
	Sigreturns: []Sigreturn{
		{Name: "sigpage rt_sigreturn (ARM)", Code: []byte{0xad, 0x70, 0xa0, 0xe3, 0xad, 0x00, 0x90, 0xef}, Regs: armRTRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
		{Name: "sigpage rt_sigreturn (Thumb)", Code: []byte{0xad, 0x27, 0x00, 0xdf}, Regs: armRTRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
		{Name: "sigpage sigreturn (ARM)", Code: []byte{0x77, 0x70, 0xa0, 0xe3, 0x77, 0x00, 0x90, 0xef}, Regs: armRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
		{Name: "sigpage sigreturn (Thumb)", Code: []byte{0x77, 0x27, 0x00, 0xdf}, Regs: armRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
		{Name: "libc rt_sigreturn (ARM)", Code: []byte{0xad, 0x70, 0xa0, 0xe3, 0x00, 0x00, 0x00, 0xef}, Regs: armRTRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
		// glibc armhf is Thumb-2: mov.w r7, #173; svc 0.
		{Name: "libc rt_sigreturn (Thumb-2)", Code: []byte{0x4f, 0xf0, 0xad, 0x07, 0x00, 0xdf}, Regs: armRTRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
		{Name: "libc sigreturn (Thumb-2)", Code: []byte{0x4f, 0xf0, 0x77, 0x07, 0x00, 0xdf}, Regs: armRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
		{Name: "libc sigreturn (ARM)", Code: []byte{0x77, 0x70, 0xa0, 0xe3, 0x00, 0x00, 0x00, 0xef}, Regs: armRegs, Slots: armSlots, PCSlot: 15 * 4, CPSRSlot: 16 * 4},
	},
}
