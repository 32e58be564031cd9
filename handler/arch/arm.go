package arch

import (
	"debug/elf"
	"encoding/binary"
)

// ARM DWARF numbers (ARM DWARF ABI §4.1): r0–r15 are 0–15.
const (
	armFP = 11
	armSP = 13
	armLR = 14
	armPC = 15
)

// ARM is 32-bit ARM (ARM and Thumb state). Its EHABI tables and signal
// frames are handled by the ARM-specific issue; the register facts live here.
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
	// APCS frame: fp points at the saved pc slot; {fp, lr} below it in
	// GCC's ARM-mode layout. Only a guarded last resort.
	FrameRecord: struct{ PrevFP, RA int64 }{-4, 0},
	MinInsn:     2,
}
