// Package arch holds the per-architecture facts the unwinder needs, as data:
// how NT_PRSTATUS lays out the registers, which DWARF registers are the stack
// pointer, frame pointer and link register, what a frame record looks like,
// and how to recognise a signal-return trampoline and where the kernel saved
// the interrupted registers. The unwinder loop never switches on the
// architecture: it reads these tables.
package arch

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/regs"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// Arch describes one target architecture.
type Arch struct {
	Name    string // the report's name: "x86_64", "aarch64", "arm", "riscv64"
	Machine elf.Machine
	Class   elf.Class
	PtrSize int
	Order   binary.ByteOrder

	SP int // DWARF number of the stack pointer
	FP int // DWARF number of the frame pointer
	LR int // DWARF number of the link register, -1 when calls push the return address
	RA int // default return-address column of CFI

	// PRStatus maps pr_reg words, in the kernel's order, to DWARF numbers.
	// PRStatusPC is the index of the program counter in pr_reg.
	PRStatus   []int
	PRStatusPC int
	// PRStatusMin is the fewest pr_reg words a valid NT_PRSTATUS carries.
	PRStatusMin int

	// FrameRecords are the frame-pointer records compilers leave, tried in
	// order; none where the frame pointer cannot be walked.
	FrameRecords []FrameRecord
	// ThumbNoFP says Thumb code has no walkable frame pointer (r7 points
	// below the locals): the frame-pointer strategy skips Thumb frames.
	ThumbNoFP bool

	// Call decodes the call instruction before a return address, for
	// call-site validation; PLT says whether code is a PLT stub (a direct
	// call's target that jumps on to another function).
	Call CallBefore
	PLT  func(code []byte) bool
	// CallTargets sweeps code (at file address vaddr) for direct calls
	// and emits their targets: function starts, which call-site
	// validation uses where a stripped file names none.
	CallTargets func(code []byte, vaddr uint64, emit func(target uint64))
	// TailBranch decodes the start of a function at address at (code
	// holds MaxTailCode bytes there) and returns the target of the direct
	// jump it begins with, after at most a few instructions that do not
	// branch: a function that only passes its arguments on. nil where
	// not decoded.
	TailBranch func(code []byte, at uint64) (uint64, bool)
	// TailIndirect reports whether a function (code holds up to
	// MaxIndirectTail bytes at its start; thumb is its instruction set)
	// ends, straight through calls, in a jump through a register: a call
	// to it reaches functions it does not name. nil where not decoded.
	TailIndirect func(code []byte, thumb bool) bool

	// Entry reports whether code (at a return address) begins the way a
	// function does: a return address right after a call that does not
	// return may be the next function's start, and a pointer to a
	// function looks the same. nil where not decoded.
	Entry func(code []byte) bool

	// Taken sweeps code (at file address vaddr) for code addresses loaded
	// as constants (a function whose address is taken: main), and
	// FrameSize decodes a function's prologue from its start up to the PC
	// (at most MaxPrologue bytes) and returns the bytes it put below the
	// return address. Where calls push the return address and no prologue
	// analyzer runs (x86), they tell the scan which of two return
	// addresses is the live one. nil where not decoded.
	Taken     func(code []byte, vaddr uint64, emit func(target uint64))
	FrameSize func(code []byte) (uint64, bool)

	// PLTHeader is the size of the lazy resolver's entry that starts
	// .plt: it saves the link register on ARM and AArch64, so a PC there
	// is not a stub's. PLTEntry is the size of the stubs after it where
	// PLTPushes is set. PLTPushes, given a stub's code from its start up
	// to the PC, counts the pushes it executed (x86's lazy stubs push the
	// relocation index); nil where stubs never touch the stack, and the
	// caller is the link register.
	PLTHeader uint64
	PLTEntry  uint64
	PLTPushes func(code []byte) (int, bool)

	// RASlotTop says compilers save the return address at the top of a
	// frame, just below the caller's SP (push {…, lr}, sd ra, N-8(sp), the
	// x86 call): a return address found on the stack then gives the
	// caller's SP exactly. AArch64 saves {x29, x30} at the bottom.
	RASlotTop bool

	// Strategies lists the unwinding strategies tried for each frame, in
	// order (package unwind implements each; it refuses to initialise if
	// one listed here has no implementation).
	Strategies []Strategy

	// MinInsn is the size of the shortest call instruction: caller frames
	// look up unwind rules at return address − 1, and a return address
	// below this is garbage.
	MinInsn uint64

	// Sigreturns lists the kernel and libc signal-return trampolines.
	Sigreturns []Sigreturn

	// PACStrip says return addresses may carry pointer-authentication bits
	// that must be cleared (AArch64).
	PACStrip bool

	// ThumbBit says code addresses carry the instruction set in bit 0
	// (ARM32: set for Thumb). Reported PCs have it cleared, as gdb and
	// addr2line expect; the state goes in the frame.
	ThumbBit bool
	// Prologue analyses a function's prologue from its start to pc (file
	// addresses; code holds the bytes at start), for code without unwind
	// tables. nil where tables are complete (x86_64).
	Prologue func(code []byte, start, pc uint64, thumb bool) (*prologue.Frame, error)

	// PRStatusCPSR is the pr_reg index of a status word whose bit 5 is the
	// Thumb state (ARM32 CPSR); -1 when there is none.
	PRStatusCPSR int
}

// CPSRThumb is the CPSR's T bit (ARM ARM, "The Current Program Status
// Register"): the thread was executing Thumb code.
const CPSRThumb = 1 << 5

// Thumb says whether a thread whose NT_PRSTATUS registers are prstatus was
// in Thumb state.
func (a *Arch) Thumb(prstatus []uint64) bool {
	i := a.PRStatusCPSR
	return i >= 0 && i < len(prstatus) && prstatus[i]&CPSRThumb != 0
}

// Sigreturn describes a signal-return trampoline: its instruction bytes and
// where the kernel's signal frame keeps the interrupted registers.
type Sigreturn struct {
	Name string
	Code []byte // instruction bytes; the PC is at their start (return address of the handler)
	// Regs is the offset from SP (at the trampoline) to the saved register
	// block; Slots maps DWARF registers to offsets inside that block, and
	// PCSlot is the offset of the interrupted program counter.
	Regs   int64
	Slots  []Slot
	PCSlot int64
	// CPSRSlot, when non-zero, is the offset of the saved status word whose
	// bit 5 is the interrupted code's Thumb state (ARM32).
	CPSRSlot int64
	// NextRecord, when non-zero, is the offset from SP to the frame record
	// the kernel puts after the signal frame, holding the interrupted
	// frame pointer and link register, where the handler's frame pointer
	// points (AArch64).
	NextRecord int64
	// Records, when non-zero, finds the frame when SP is unknown (a
	// frame-pointer step reached the trampoline): the kernel points the
	// handler's frame pointer at a frame record it puts just above the
	// signal frame, whose context records start at offset Records with
	// the header word FirstRecord (magic, then size, as one word).
	Records     int64
	FirstRecord uint64
}

// FrameRecord is one frame-pointer convention: where the record keeps the
// caller's frame pointer and return address, as offsets from the frame
// pointer, and where the caller's stack pointer is.
type FrameRecord struct {
	Name   string
	PrevFP int64
	RA     int64 // ignored for Leaf records
	// CallerSP is the caller's SP as an offset from the frame pointer;
	// SPExact says it is the caller's SP itself, not merely a lower bound
	// (AArch64 puts the record at the bottom of a frame of unknown size).
	CallerSP int64
	SPExact  bool
	// Leaf records save no return address: it is still in the link
	// register, so they apply to the innermost frame only.
	Leaf bool
}

// Slot is one saved register in a signal frame.
type Slot struct {
	Reg int
	Off int64
}

// ByMachine returns the architecture of an ELF core or binary.
func ByMachine(m elf.Machine, c elf.Class) (*Arch, error) {
	for _, a := range all {
		if a.Machine == m && a.Class == c {
			return a, nil
		}
	}
	return nil, fmt.Errorf("arch: unsupported machine %v (%v)", m, c)
}

// ByName returns the architecture with the report name n.
func ByName(n string) (*Arch, error) {
	for _, a := range all {
		if a.Name == n {
			return a, nil
		}
	}
	return nil, fmt.Errorf("arch: unknown architecture %q", n)
}

// A Strategy names one way of recovering a frame's caller. The names are
// what reports carry as a frame's method.
type Strategy string

// The strategies, in the order they are usually tried: exact ones first.
const (
	Signal   Strategy = "signal"   // a signal frame the kernel wrote
	PLT      Strategy = "plt"      // a linker's stub: the caller is the link register
	CFI      Strategy = "cfi"      // DWARF call frame information
	EHABI    Strategy = "ehabi"    // ARM's exception tables
	Prologue Strategy = "prologue" // decoded from the function's prologue
	LR       Strategy = "lr"       // the link register, or the return address at SP
	FP       Strategy = "fp"       // the frame-pointer chain
	Scan     Strategy = "scan"     // a validated return address found on the stack
)

// All is every architecture this package describes.
var All = all

var all = []*Arch{X86_64, AArch64, RISCV64, ARM}

// FromPRStatus returns the program counter and the DWARF register set of a
// thread from its NT_PRSTATUS pr_reg words.
func (a *Arch) FromPRStatus(words []uint64) (pc uint64, rs regs.Set, err error) {
	if len(words) < a.PRStatusMin {
		return 0, rs, fmt.Errorf("arch %s: NT_PRSTATUS has %d registers, want at least %d", a.Name, len(words), a.PRStatusMin)
	}
	for i, n := range a.PRStatus {
		if n >= 0 && i < len(words) {
			rs.Set(n, words[i])
		}
	}
	return words[a.PRStatusPC], rs, nil
}

// StripPAC clears pointer-authentication bits from a return address. mask
// is the kernel's NT_ARM_PAC_MASK insn mask, or 0 when unknown, in which
// case everything above a 48-bit user address space is cleared.
func (a *Arch) StripPAC(v, mask uint64) uint64 {
	if !a.PACStrip {
		return v
	}
	if mask == 0 {
		mask = 0xffff_0000_0000_0000
	}
	return v &^ mask
}

// ReadPtr reads one pointer-sized word at addr.
func (a *Arch) ReadPtr(mem io.ReaderAt, addr uint64) (uint64, error) {
	var b [8]byte
	p := b[:a.PtrSize]
	if _, err := mem.ReadAt(p, int64(addr)); err != nil {
		return 0, err
	}
	if a.PtrSize == 4 {
		return uint64(a.Order.Uint32(p)), nil
	}
	return a.Order.Uint64(p), nil
}
