package unwind

import (
	"errors"
	"fmt"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// prologue decodes the frame setup of the function holding the PC, from
// its start (a symbol, or the ARM unwind entry) up to the PC.
func (prologueStrategy) prologue(u *unwinder, m *module.Module, cur state, first bool) (state, error) {
	if cur.spApprox {
		return state{}, errors.New("prologue: SP is only known roughly")
	}
	pc := cur.pc - m.Bias()
	start, ok := m.File.FuncStart(lookupPC(cur) - m.Bias())
	if ok && m.File.EHABI != nil {
		if e, _ := m.File.EHABI.Lookup(lookupPC(cur) - m.Bias()); e != nil && e.Start > start {
			start = e.Start
		}
	}
	// Without a symbol the start is a guess: an unwind-table entry may
	// belong to an earlier function (entries run to the next one), and a
	// guessed start invents frames. Stripped static binaries stop here.
	if !ok || pc < start || pc-start > 1<<16 {
		return state{}, errors.New("prologue: function start unknown (no symbol)")
	}
	next, _, err := u.prologueAt(m, cur, start, first)
	return next, err
}

// prologueAt decodes the prologue of the function starting at the file
// address start, up to the frame's PC, and recovers the caller from it.
// It also returns the decoded frame: where the return address was saved.
func (u *unwinder) prologueAt(m *module.Module, cur state, start uint64, first bool) (state, *prologue.Frame, error) {
	a := u.p.Arch
	pc := cur.pc - m.Bias()
	n := pc - start
	if n > prologue.MaxCode {
		n = prologue.MaxCode
	}
	code := make([]byte, n)
	if err := m.File.ReadCode(start, code); err != nil {
		return state{}, nil, err
	}
	fr, err := a.Prologue(code, start, pc, cur.thumb)
	if err != nil {
		return state{}, nil, err
	}
	sp, ok := cur.rs.Get(a.SP)
	if !ok {
		return state{}, nil, errors.New("prologue: no stack pointer")
	}
	cfa, err := fr.CFA(sp, cur.rs.Get)
	if err != nil {
		return state{}, nil, err
	}
	next := state{rs: cur.rs}
	for r, off := range fr.Saved {
		v, err := u.readPtr(uint64(int64(cfa) + off))
		if err != nil {
			return state{}, nil, err
		}
		next.rs.Set(r, v)
	}
	next.rs.Set(a.SP, cfa)
	switch {
	case hasSlot(fr, a.RA):
		next.pc, _ = next.rs.Get(a.RA)
		next.raMem = true
	case first && a.LR >= 0:
		// A leaf that saved nothing: the return address is still in LR.
		lr, ok := cur.rs.Get(a.LR)
		if !ok {
			return state{}, nil, errors.New("prologue: return address not saved and LR unknown")
		}
		next.pc = lr
	default:
		return state{}, nil, errors.New("prologue: return address not saved")
	}
	if a.LR >= 0 {
		// The caller's own LR was clobbered by its call: what the slot
		// held is its PC, not its link register. Left there, a rule that
		// takes the PC from LR would give this frame again.
		next.rs.Clear(a.LR)
	}
	if module.Find(u.p.Modules, next.pc&^1) < 0 {
		return state{}, nil, errors.New("prologue: the return address is in no module")
	}
	return next, fr, nil
}

func hasSlot(f *prologue.Frame, reg int) bool {
	_, ok := f.Saved[reg]
	return ok
}

type prologueStrategy struct{}

func (prologueStrategy) name() string { return MethodPrologue }
func (prologueStrategy) trust() Trust { return TrustMedium }
func (strat prologueStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.m == nil || f.m.File == nil || u.p.Arch.Prologue == nil {
		return state{}, errSkip
	}
	next, err := strat.prologue(u, f.m, f.cur, f.first)
	if err != nil {
		if lost := strat.lostRA(u, f); lost != nil {
			return state{}, lost
		}
		return state{}, err
	}
	// The start came from a symbol; the return address must still follow
	// a call instruction.
	if _, err := u.callSite(next.pc, f.cur, false); err != nil {
		return state{}, err
	}
	return next, nil
}

// lostRA ends the walk where the return address is gone: the frame's PC
// returns from a call (it is no interrupted PC), and the function, decoded
// from its start (a symbol, or the target of a direct call), saved
// nothing before that call: the return address was in the link register,
// and the call overwrote it. Such a call does not return (clang omits the
// save before abort()), and whatever a scan found above would skip the
// callers whose return addresses were never stored: wrong frames, where
// stopping is honest.
func (prologueStrategy) lostRA(u *unwinder, f *frame) error {
	a := u.p.Arch
	if f.cur.exact || f.cur.spApprox || a.LR < 0 || a.Prologue == nil {
		return nil
	}
	ra := f.cur.pc
	if f.cur.thumb {
		ra |= 1
	}
	if _, err := u.callSite(ra, f.cur, false); err != nil {
		return nil // not a return address: a rule, not a call, gave the PC
	}
	b := f.m.Bias()
	pc := f.cur.pc - b
	var start uint64
	var ok bool
	if a.ThumbBit {
		// Neither a call target nor an index entry (EXIDX_CANTUNWIND
		// fills gaps of several functions) says whether Thumb or A32
		// code starts there, and bytes of one decoded as the other save
		// nothing: an -marm main above a Thumb function of glibc read as
		// a function that lost its return address. Only a symbol, in the
		// PC's alignment, starts a function here.
		start, ok = f.m.File.FuncStart(lookupPC(f.cur) - b)
		if !f.cur.thumb && start%4 != 0 {
			return nil
		}
	} else {
		start, ok = u.funcStart(f.m.File, lookupPC(f.cur)-b)
	}
	if !ok || pc <= start || pc-start > prologue.MaxCode {
		return nil
	}
	code := make([]byte, pc-start)
	if f.m.File.ReadCode(start, code) != nil {
		return nil
	}
	if _, err := a.Prologue(code, start, pc, f.cur.thumb); !errors.Is(err, prologue.ErrNoPrologue) {
		return nil
	}
	return &stepError{StopUndefinedRA, fmt.Sprintf("the function at %#x saved no return address before its call returning to %#x, which does not return: its callers are unknown", start+b, f.cur.pc)}
}
