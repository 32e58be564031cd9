package arch

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/handler/elf"
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

func armSigreturn(name string, code []byte, base int64) Sigreturn {
	return Sigreturn{Name: name, Code: code, Regs: base, Slots: slots4(0, 16), PCSlot: 15 * 4, CPSRSlot: 16 * 4}
}

// slots4 is slots for 4-byte registers.
func slots4(first, n int) []Slot {
	s := make([]Slot, n)
	for i := range s {
		s[i] = Slot{first + i, int64(i) * 4}
	}
	return s
}

func le16(hw ...uint16) []byte {
	b := make([]byte, 0, 2*len(hw))
	for _, h := range hw {
		b = binary.LittleEndian.AppendUint16(b, h)
	}
	return b
}

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
	PRStatus:    seq(0, 16),
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
	Strategies:   []string{"signal", "cfi", "ehabi", "prologue", "lr", "fp", "scan"},
	MinInsn:      2,
	ThumbBit:     true,
	Prologue:     prologue.ARM,
	PRStatusCPSR: 16,
	// The kernel's [sigpage] codes (arch/arm/kernel/sigreturn_codes.S) in
	// ARM and Thumb state, rt and not, then the restorers glibc and musl
	// install (mov r7, #nr; svc 0). musl's carry no unwind information:
	// matching the bytes is the only way across them.
	Sigreturns: []Sigreturn{
		armSigreturn("sigpage rt_sigreturn (ARM)", le32(0xe3a070ad, 0xef9000ad), armRTRegs),
		armSigreturn("sigpage rt_sigreturn (Thumb)", le16(0x27ad, 0xdf00), armRTRegs),
		armSigreturn("sigpage sigreturn (ARM)", le32(0xe3a07077, 0xef900077), armRegs),
		armSigreturn("sigpage sigreturn (Thumb)", le16(0x2777, 0xdf00), armRegs),
		armSigreturn("libc rt_sigreturn (ARM)", le32(0xe3a070ad, 0xef000000), armRTRegs),
		// glibc armhf is Thumb-2: mov.w r7, #173; svc 0.
		armSigreturn("libc rt_sigreturn (Thumb-2)", le16(0xf04f, 0x07ad, 0xdf00), armRTRegs),
		armSigreturn("libc sigreturn (Thumb-2)", le16(0xf04f, 0x0777, 0xdf00), armRegs),
		armSigreturn("libc sigreturn (ARM)", le32(0xe3a07077, 0xef000000), armRegs),
	},
}
