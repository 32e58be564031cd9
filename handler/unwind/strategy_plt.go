package unwind

import (
	"errors"
	"fmt"
)

type pltStrategy struct{}

func (pltStrategy) name() string { return MethodPLT }
func (pltStrategy) trust() Trust { return TrustHigh }
func (pltStrategy) step(u *unwinder, f *frame) (state, error) {
	// A stub the thread was stopped in (frame 0, or a signal's frame) has
	// touched neither SP nor the link register: the call that led to it
	// is the caller, exactly. A stub's address as a return address says
	// nothing of the kind, nor does a guessed SP.
	if !f.cur.exact || f.cur.spApprox || f.m == nil || f.m.File == nil {
		return state{}, errSkip
	}
	a := u.p.Arch
	pc := f.cur.pc - f.m.Bias()
	st, ok := f.m.File.InPLT(pc)
	if !ok {
		return state{}, errSkip
	}
	inHeader := st.Header && pc-st.Start < a.PLTHeader
	if inHeader {
		// The resolver's entry saves LR (ARM, AArch64), or pushes what
		// the linker's stubs handed it in ways that differ (GNU ld's
		// pushed index, mold's r11): no stub's frame.
		return state{}, errors.New("plt: the pc is in the resolver's entry")
	}
	var next state
	if a.PLTPushes == nil {
		n, err := u.fromLR(f.cur)
		if err != nil {
			return state{}, fmt.Errorf("plt: %w", err)
		}
		next = n
	} else {
		// Calls push the return address: count what the stub pushed on
		// top of it.
		base := st.Start
		if st.Header {
			base += a.PLTHeader
		}
		entry, pushed := base+(pc-base)/a.PLTEntry*a.PLTEntry, 0
		code := make([]byte, pc-entry)
		if err := f.m.File.ReadCode(entry, code); err != nil {
			return state{}, fmt.Errorf("plt: %w", err)
		}
		n, ok := a.PLTPushes(code)
		if !ok {
			return state{}, fmt.Errorf("plt: the stub at %#x is not one this unwinder knows", entry+f.m.Bias())
		}
		sp, _ := f.cur.rs.Get(a.SP)
		at := sp + uint64((n+pushed)*a.PtrSize)
		ra, err := u.readPtr(at)
		if err != nil {
			return state{}, &stepError{StopMemory, fmt.Sprintf("plt: return address at %#x: %v", at, err)}
		}
		next = state{pc: ra, rs: f.cur.rs}
		next.rs.Set(a.SP, at+uint64(a.PtrSize))
		next.rs.Set(a.RA, ra)
	}
	if mi, m := u.module(next.pc &^ 1); mi < 0 || !m.InCode(next.pc&^1-1) {
		return state{}, fmt.Errorf("plt: the return address %#x is not in code", next.pc)
	}
	return next, nil
}
