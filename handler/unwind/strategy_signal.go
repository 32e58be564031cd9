package unwind

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// sigreturn recognises a signal trampoline by its instruction bytes and
// recovers the interrupted registers from the kernel's signal frame.
func (strat signalStrategy) sigreturn(u *unwinder, m *module.Module, cur state) (state, bool, error) {
	sr := strat.trampoline(u, m, cur.pc)
	if sr == nil {
		return state{}, false, nil
	}
	sp, ok := cur.rs.Get(u.p.Arch.SP)
	if !ok {
		return state{}, true, &stepError{StopMemory, "no stack pointer at the signal frame"}
	}
	if cur.spApprox {
		// The saved registers sit at a fixed offset from SP: a frame
		// pointer step's lower bound would read them from the wrong
		// place. The kernel's frame record above the frame finds it.
		if sp, ok = strat.sigFrameBelowFP(u, sr, cur); !ok {
			return state{}, true, errors.New("signal frame: SP is only known roughly")
		}
	}
	next, err := strat.sigframe(u, sr, sp)
	return next, true, err
}

// trampoline returns the signal-return trampoline whose code is at pc, nil
// when there is none; m is the module holding pc, nil outside every module.
func (signalStrategy) trampoline(u *unwinder, m *module.Module, pc uint64) *arch.Sigreturn {
	a := u.p.Arch
	if u.notTramp[pc] {
		return nil
	}
	for i := range a.Sigreturns {
		sr := &a.Sigreturns[i]
		code := make([]byte, len(sr.Code))
		if err := u.readCode(m, pc, code); err == nil && bytes.Equal(code, sr.Code) {
			return sr
		}
	}
	if len(u.notTramp) >= 4096 {
		clear(u.notTramp)
	}
	u.notTramp[pc] = true
	return nil
}

// sigframe reads the registers a signal interrupted from the kernel's
// signal frame, for the trampoline sr reached with the stack pointer sp.
func (signalStrategy) sigframe(u *unwinder, sr *arch.Sigreturn, sp uint64) (state, error) {
	base := sp + uint64(sr.Regs)
	var next state
	next.exact = true
	for _, sl := range sr.Slots {
		v, err := u.readPtr(base + uint64(sl.Off))
		if err != nil {
			return state{}, &stepError{StopMemory, fmt.Sprintf("signal frame at %#x: %v", base, err)}
		}
		next.rs.Set(sl.Reg, v)
	}
	pc, err := u.readPtr(base + uint64(sr.PCSlot))
	if err != nil {
		return state{}, &stepError{StopMemory, fmt.Sprintf("signal frame at %#x: %v", base, err)}
	}
	next.pc = pc
	if sr.CPSRSlot != 0 {
		cpsr, err := u.readPtr(base + uint64(sr.CPSRSlot))
		if err == nil {
			next.thumb = cpsr&arch.CPSRThumb != 0
		}
		next.pc &^= 1
	}
	return next, nil
}

// maxSigFrame bounds the search for a signal frame below the frame record
// the kernel put above it: FP/SIMD, SVE and SME state make it large.
const maxSigFrame = 64 << 10

// sigFrameBelowFP finds the signal frame that sr describes when SP is
// unknown, from the frame pointer the handler's frame record restored
// (the kernel's record just above the frame): the highest 16-byte aligned
// address below it whose context records start with sr.FirstRecord and
// chain, record by record, to their terminator below the frame pointer.
// It returns the SP at the trampoline: the frame's start.
func (strat signalStrategy) sigFrameBelowFP(u *unwinder, sr *arch.Sigreturn, cur state) (uint64, bool) {
	a := u.p.Arch
	fp, ok := cur.rs.Get(a.FP)
	if !ok {
		// A scan step knows no registers but SP: the thread's own frame
		// pointer may still be the kernel's, checked below.
		fp = u.fp0
	}
	low, _ := cur.rs.Get(a.SP) // a lower bound: the frame is above the handler's
	if sr.Records == 0 || fp < maxSigFrame || fp < low {
		return 0, false
	}
	rec := uint64(sr.Records)
	for b := (fp &^ 15) - rec - 16; fp-b <= maxSigFrame && b >= low; b -= 16 {
		h, err := u.readPtr(b + rec)
		if err != nil {
			return 0, false
		}
		if h == sr.FirstRecord && strat.recordsEnd(u, b+rec, fp) && strat.kernelRecord(u, sr, b, fp) {
			return b, true
		}
	}
	return 0, false
}

// kernelRecord checks the frame record at fp against the signal frame at
// b: the kernel saves the interrupted frame pointer and link register in
// both.
func (signalStrategy) kernelRecord(u *unwinder, sr *arch.Sigreturn, b, fp uint64) bool {
	a := u.p.Arch
	n := 0
	for _, sl := range sr.Slots {
		var at uint64
		switch sl.Reg {
		case a.FP:
			at = fp
		case a.LR:
			at = fp + uint64(a.PtrSize)
		default:
			continue
		}
		v, err1 := u.readPtr(b + uint64(sr.Regs) + uint64(sl.Off))
		w, err2 := u.readPtr(at)
		if err1 != nil || err2 != nil || v != w {
			return false
		}
		n++
	}
	return n == 2
}

// recordsEnd follows a chain of {magic, size} context records from at and
// reports whether it reaches the terminator (both zero) below limit.
func (signalStrategy) recordsEnd(u *unwinder, at, limit uint64) bool {
	for i := 0; i < 32 && at < limit; i++ {
		h, err := u.readPtr(at)
		if err != nil {
			return false
		}
		size := h >> 32
		if h == 0 {
			return true
		}
		if size < 16 || size%16 != 0 || size > maxSigFrame {
			return false
		}
		at += size
	}
	return false
}

type signalStrategy struct{}

func (signalStrategy) name() string { return MethodSignal }
func (signalStrategy) trust() Trust { return TrustHigh }
func (strat signalStrategy) step(u *unwinder, f *frame) (state, error) {
	// Trampolines may sit on pages of their own, outside every file: ARM's
	// [sigpage], qemu-user's sigtramp page. Their code is in memory.
	next, ok, err := strat.sigreturn(u, f.m, f.cur)
	if !ok {
		return state{}, errSkip
	}
	next.raMem = true
	return next, err
}

// isTrampoline reports whether code at pc is a signal-return trampoline.
func (u *unwinder) isTrampoline(pc uint64) bool {
	mi, m := u.module(pc)
	if mi < 0 {
		m = nil
	}
	return (signalStrategy{}).trampoline(u, m, pc) != nil
}

// scannedSigframe checks a return address ra found at slot by the scan,
// when ra is a signal trampoline's: the kernel left it as the handler's
// return address, and the signal frame lies just above it. Stale copies
// are common below a live frame (musl's sigaction hands the restorer to
// the kernel in a struct on the stack), and a walk through a stale one
// reads a signal frame out of garbage: the frame must hold an interrupted
// context that makes sense, a stack pointer to memory and a PC in code.
// It returns the SP at the trampoline (the signal frame's start), 0 when
// ra is no trampoline's.
//
// Where the return address is saved at the bottom of a frame (AArch64),
// the signal frame is placed from the frame record instead: the handler
// saved {x29, x30} with x30 the trampoline and x29 the record the kernel
// put after the signal frame (sr.NextRecord), which repeats the
// interrupted x29 and x30. Without that agreement the address is refused:
// the words above it are the signal frame's saved registers, not return
// addresses.
func (u *unwinder) scannedSigframe(ra, slot uint64) (uint64, error) {
	a := u.p.Arch
	mi, m := u.module(ra)
	if mi < 0 {
		m = nil
	}
	sr := (signalStrategy{}).trampoline(u, m, ra)
	if sr == nil {
		return 0, nil
	}
	ps := uint64(a.PtrSize)
	sigSP := slot + ps
	var rec uint64
	if !a.RASlotTop {
		// The context records between the frame and the kernel's record
		// place it (sigFrameBelowFP), from the x29 saved beside the
		// address or the thread's own; else the record's fixed offset
		// after a frame without extra context.
		saved, err := u.readPtr(slot - ps)
		if err != nil {
			return 0, err
		}
		var probe state
		probe.rs.Set(a.SP, slot+ps)
		if saved != 0 {
			probe.rs.Set(a.FP, saved)
		}
		if s, ok := (signalStrategy{}).sigFrameBelowFP(u, sr, probe); ok {
			sigSP = s
		} else {
			if sr.NextRecord == 0 {
				return 0, errors.New("a signal trampoline's address, but not where its signal frame is")
			}
			rec = saved
			sigSP = rec - uint64(sr.NextRecord)
			if rec < uint64(sr.NextRecord) || sigSP <= slot || sigSP%16 != 0 {
				return 0, fmt.Errorf("signal frame above %#x: the handler's frame record does not point past it", slot)
			}
		}
	}
	ctx, err := (signalStrategy{}).sigframe(u, sr, sigSP)
	if err != nil {
		return 0, err
	}
	sp, _ := ctx.rs.Get(a.SP)
	var b [1]byte
	if sp == 0 || sp%ps != 0 {
		return 0, fmt.Errorf("signal frame above %#x: no plausible stack pointer", slot)
	}
	if _, err := u.p.Mem.ReadAt(b[:], int64(sp)); err != nil {
		return 0, fmt.Errorf("signal frame above %#x: the stack pointer %#x is not in memory", slot, sp)
	}
	// The module is loaded first: without its file, NT_FILE's mappings
	// say nothing of what is code.
	if pm, pmod := u.module(ctx.pc); pm < 0 || !pmod.InCode(ctx.pc) {
		return 0, fmt.Errorf("signal frame above %#x: the pc %#x is not in code", slot, ctx.pc)
	}
	if rec != 0 && !(signalStrategy{}).kernelRecord(u, sr, sigSP, rec) {
		return 0, fmt.Errorf("signal frame at %#x: the record after it does not repeat the interrupted frame pointer and link register", sigSP)
	}
	return sigSP, nil
}
