package unwind

import (
	"errors"
	"fmt"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// fromLR takes the return address from the link register, or from [SP] on
// architectures whose calls push it.
func (u *unwinder) fromLR(cur state) (state, error) {
	a := u.p.Arch
	next := cur
	next.exact = false
	if a.LR >= 0 {
		lr, ok := cur.rs.Get(a.LR)
		if !ok || lr == 0 {
			return state{}, errors.New("no link register")
		}
		next.pc = a.StripPAC(lr, u.p.PACMask)
		// The caller's LR is unknown until its own rules say.
		next.rs.Clear(a.LR)
		return next, nil
	}
	sp, ok := cur.rs.Get(a.SP)
	if !ok {
		return state{}, errors.New("no stack pointer")
	}
	ra, err := u.readPtr(sp)
	if err != nil {
		return state{}, err
	}
	next.pc = ra
	next.rs.Set(a.SP, sp+uint64(a.PtrSize))
	next.rs.Set(a.RA, ra)
	return next, nil
}

type lrStrategy struct{}

func (lrStrategy) name() string { return MethodLR }
func (lrStrategy) trust() Trust { return TrustMedium }
func (strat lrStrategy) step(u *unwinder, f *frame) (state, error) {
	a := u.p.Arch
	// The link register holds this frame's return address only while the
	// frame is interrupted where the thread stopped (frame 0, or a frame a
	// signal interrupted) and the function saved nothing yet: a leaf, or a
	// call through a wild pointer (the PC is in no module). On x86 the
	// return address is at [SP] only on entry: used for wild PCs alone.
	if !f.cur.exact || f.outermost || f.cantUnwind || (a.LR < 0 && f.mi >= 0) {
		return state{}, errSkip
	}
	next, err := u.fromLR(f.cur)
	if err != nil {
		return state{}, err
	}
	c, err := u.callSite(next.pc, f.cur, f.mi >= 0)
	var sb *siteBetween
	if errors.As(err, &sb) {
		// LR is a return address into the function itself: left by a
		// call it made, or the recursion's own. Its prologue, from the
		// start the call names, tells: the return address saved in its
		// slot is then the caller's.
		return strat.recursion(u, f, c, sb)
	}
	if err != nil {
		return state{}, err
	}
	leaf := f.mi < 0 // a wild PC is no function: SP is exact there
	if start, ok := strat.leafStart(u, f, c); ok {
		// The call, or a symbol, names the function's start: if its
		// prologue saved the return address already, LR may have been
		// reused since.
		pn, fr, err := u.prologueAt(f.m, f.cur, start, true)
		switch {
		case errors.Is(err, prologue.ErrWrongStart):
			return state{}, err
		case errors.Is(err, prologue.ErrNoPrologue):
			// Nothing pushed before the PC: a leaf so far, LR and SP
			// are the caller's.
			leaf = true
		case err == nil:
			// Saved: take it from its slot. Not saved: LR still holds it,
			// and the prologue gives the caller's SP.
			if saved := hasSlot(fr, u.p.Arch.RA); saved {
				if _, err := u.callSite(pn.pc, f.cur, true); err != nil {
					return state{}, fmt.Errorf("saved return address: %w", err)
				}
				pn.raMem = true
			}
			pn.via = MethodPrologue
			return pn, nil
		}
	}
	// An indirect call cannot be checked against the callee: the function
	// may have called another since, leaving LR pointing into itself.
	next.weak = !c.Direct && f.mi >= 0
	// Unless proven a leaf, the function may have pushed a frame already,
	// whose size nobody knows: SP is a lower bound, and the caller's rules
	// may not be computed from it (a CFA taken from it would read the
	// callee's own saved return address: the same frame again).
	next.spApprox = !leaf
	return next, nil
}

// recursion recovers the caller of a frame whose LR returns into its own
// function, from the prologue at the start the call names: only a saved
// return address is taken.
func (lrStrategy) recursion(u *unwinder, f *frame, c arch.Call, sb *siteBetween) (state, error) {
	if f.m == nil || f.m.File == nil || u.p.Arch.Prologue == nil {
		return state{}, fmt.Errorf("LR returns into the function itself: %w", sb)
	}
	pn, fr, err := u.prologueAt(f.m, f.cur, c.Target-f.m.Bias(), true)
	if err != nil {
		return state{}, fmt.Errorf("%v: %w", sb, err)
	}
	if !hasSlot(fr, u.p.Arch.RA) {
		return state{}, fmt.Errorf("%v, and the prologue saved no return address", sb)
	}
	if _, err := u.callSite(pn.pc, f.cur, true); err != nil {
		var sb *siteBetween
		if !errors.As(err, &sb) {
			return state{}, fmt.Errorf("saved return address: %w", err)
		}
	}
	pn.via = MethodPrologue
	return pn, nil
}

// leafStart returns the file address where the function holding the frame's
// PC starts, when something names it: the direct call that LR returns
// from (in the same module), or else a symbol.
func (lrStrategy) leafStart(u *unwinder, f *frame, c arch.Call) (uint64, bool) {
	if f.mi < 0 || f.m.File == nil || u.p.Arch.Prologue == nil {
		return 0, false
	}
	if c.Direct && module.Find(u.p.Modules, c.Target) == f.mi {
		return c.Target - f.m.Bias(), true
	}
	pc := f.cur.pc - f.m.Bias()
	if s, ok := f.m.File.FuncStart(pc); ok && s <= pc && pc-s <= 1<<16 {
		return s, true
	}
	return 0, false
}
