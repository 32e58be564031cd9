package arch

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/elf"
)

// DWARF numbers, x86-64 psABI §3.6.2 figure 3.36.
const (
	x86RAX = iota
	x86RDX
	x86RCX
	x86RBX
	x86RSI
	x86RDI
	x86RBP
	x86RSP
	x86R8
	x86R9
	x86R10
	x86R11
	x86R12
	x86R13
	x86R14
	x86R15
	x86RIP
)

// X86_64 is the 64-bit x86 architecture.
var X86_64 = &Arch{
	Name:    "x86_64",
	Machine: elf.EM_X86_64,
	Class:   elf.ELFCLASS64,
	PtrSize: 8,
	Order:   binary.LittleEndian,
	SP:      x86RSP,
	FP:      x86RBP,
	LR:      -1,
	RA:      x86RIP,
	// struct user_regs_struct, arch/x86/include/asm/user_64.h.
	PRStatus: []int{
		x86R15, x86R14, x86R13, x86R12, x86RBP, x86RBX, x86R11, x86R10,
		x86R9, x86R8, x86RAX, x86RCX, x86RDX, x86RSI, x86RDI,
		-1,     // orig_rax
		x86RIP, // rip
		-1, -1, // cs, eflags
		x86RSP,
	},
	PRStatusCPSR: -1,
	PRStatusPC:   16,
	PRStatusMin:  20,
	// push %rbp; mov %rsp, %rbp: {rbp, rip} at rbp, the caller's SP above.
	FrameRecords: []FrameRecord{{Name: "rbp", PrevFP: 0, RA: 8, CallerSP: 16, SPExact: true}},
	Call:         callX86,
	RASlotTop:    true,
	PLT:          pltX86,
	CallTargets:  sweepX86,
	TailBranch:   tailX86,
	PLTHeader:    16, // push GOT+8; jmp *GOT+16
	PLTEntry:     16,
	PLTPushes:    pltPushesX86,
	Entry:        entryX86,
	Taken:        takenX86,
	FrameSize:    frameX86,
	Strategies:   []Strategy{Signal, CFI, PLT, LR, FP, Scan},
	MinInsn:      1,
	Sigreturns: []Sigreturn{{
		// mov $15,%rax; syscall: glibc's and musl's __restore_rt. The
		// handler's ret popped pretcode, so SP points at the ucontext;
		// uc_mcontext follows uc_flags, uc_link and uc_stack (0x28).
		// Layout: struct sigcontext, arch/x86/include/uapi/asm/sigcontext.h.
		Name: "__restore_rt",
		Code: []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05},
		Regs: 0x28,
		Slots: []Slot{
			{x86R8, 0}, {x86R9, 8}, {x86R10, 16}, {x86R11, 24},
			{x86R12, 32}, {x86R13, 40}, {x86R14, 48}, {x86R15, 56},
			{x86RDI, 64}, {x86RSI, 72}, {x86RBP, 80}, {x86RBX, 88},
			{x86RDX, 96}, {x86RAX, 104}, {x86RCX, 112}, {x86RSP, 120},
			{x86RIP, 128},
		},
		PCSlot: 128,
	}},
}
