package unwind

import (
	"errors"
	"fmt"
	"strings"

	"github.com/unwound-dev/unwound/handler/module"
)

type unwinder struct {
	p     *Process
	list  []strategy
	f     frame // the frame being unwound
	tried map[*module.Module]bool
	rows  map[rowKey]rowVal
	// notTramp caches PCs whose code is not a signal trampoline.
	notTramp map[uint64]bool
	// fp0 is the thread's frame pointer where it stopped: code built
	// without frame pointers leaves there what the kernel set for a
	// signal handler, a hint for finding its frame (sigFrameBelowFP).
	fp0 uint64
	// seen holds the PCs of the frames walked at the stack pointer
	// seenSP: a caller found among them would repeat a frame.
	seen   map[uint64]bool
	seenSP uint64
}

// module returns the module holding pc, loading it on first use.
func (u *unwinder) module(pc uint64) (int, *module.Module) {
	mi := module.Find(u.p.Modules, pc)
	if mi < 0 {
		return -1, nil
	}
	m := u.p.Modules[mi]
	if m.File == nil && m.Err == nil && u.p.Load != nil && !u.tried[m] {
		u.tried[m] = true
		u.p.Load(m)
	}
	return mi, m
}

// step recovers the caller of cur with the first strategy that succeeds.
// When all fail, the error's detail says why each one did.
func (u *unwinder) step(cur state, first bool) (state, strategy, error) {
	mi, m := u.module(cur.pc)
	// The frame lives in the unwinder: strategies take it through an
	// interface, and a fresh one per step would be a heap allocation.
	u.f = frame{cur: cur, first: first, mi: mi, m: m}
	f := &u.f
	var why []string
	repeated := ""
	for _, s := range u.list {
		next, err := s.step(u, f)
		if err == nil {
			if u.p.Arch.ThumbBit && s.name() != MethodSignal {
				// Code addresses carry the instruction set in bit 0; a
				// signal frame's state came from the saved CPSR instead.
				next.thumb = next.pc&1 != 0
				next.pc &^= 1
			}
			reason, msg := u.repeats(cur, next, s)
			if reason == "" {
				return next, s, nil
			}
			if repeated == "" {
				repeated = reason
			}
			err = errors.New(msg)
		}
		if errors.Is(err, errSkip) {
			continue
		}
		var se *stepError
		if errors.As(err, &se) {
			return state{}, s, err
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, s.name()+": ") {
			msg = s.name() + ": " + msg
		}
		why = append(why, msg)
	}
	reason := StopNoUnwindInfo
	where := "the pc is in no module"
	switch {
	case repeated != "":
		reason = repeated
		where = "every strategy failed or gave a frame again"
		if m != nil {
			where = m.Path
		}
	case mi < 0:
		reason = StopOutside
	case f.outermost || f.cantUnwind:
		reason = StopEndOfStack
		where = m.Path
	default:
		// Say plainly which module had no unwind information.
		where = m.Path
	}
	if len(why) > 0 {
		where += ": " + strings.Join(why, "; ")
	}
	return state{}, nil, &stepError{reason, where}
}

// repeats says why next, the caller a strategy s recovered from cur, may
// not be taken: a frame already walked (the same PC at the same SP), or
// the same PC again at a higher SP that nothing proves a recursion. It
// returns the stop reason and a message, or "" when next is new.
//
// A recursion repeats the PC while SP rises by the frame's size, each
// return address read from the frame's own slot: that is taken when the
// rule that found the slot started from an exact SP. A rule that keeps
// the return address in a register (a wrong table, an EHABI entry that
// belongs to a neighbour, LR still holding the frame's own PC) gives the
// same PC too, for ever: the next strategy is tried instead.
func (u *unwinder) repeats(cur, next state, s strategy) (string, string) {
	a := u.p.Arch
	sp, _ := cur.rs.Get(a.SP)
	nsp, _ := next.rs.Get(a.SP)
	switch {
	case nsp == u.seenSP && u.seen[next.pc]:
		return StopRepeated, fmt.Sprintf("%s: gave the pc %#x at the SP %#x again", s.name(), next.pc, nsp)
	case next.pc != cur.pc:
		return "", ""
	case !next.raMem:
		return StopLoop, fmt.Sprintf("%s: gave the pc %#x again, the return address not read from the stack", s.name(), next.pc)
	case cur.spApprox || nsp <= sp:
		return StopLoop, fmt.Sprintf("%s: gave the pc %#x again from an SP known only roughly", s.name(), next.pc)
	case s.name() == MethodScan && next.via == "" && !next.selfCall:
		return StopLoop, fmt.Sprintf("%s: gave the pc %#x again, unconfirmed", s.name(), next.pc)
	}
	return "", ""
}

// lookupPC is where a frame's unwind rules are looked up: the PC itself
// for an interrupted instruction, the byte before the return address
// otherwise (a call as a function's last instruction returns past its end).
func lookupPC(s state) uint64 {
	if s.exact {
		return s.pc
	}
	return s.pc - 1
}

// readCode reads instruction bytes at a runtime address: from the file when
// the module has one (code is not in the core), else from memory (vDSO,
// [sigpage]); m is nil outside every module.
func (u *unwinder) readCode(m *module.Module, pc uint64, p []byte) error {
	if m != nil && m.File != nil {
		if err := m.File.ReadCode(pc-m.Bias(), p); err == nil {
			return nil
		}
	}
	_, err := u.p.Mem.ReadAt(p, int64(pc))
	return err
}

func (u *unwinder) readPtr(addr uint64) (uint64, error) {
	return u.p.Arch.ReadPtr(u.p.Mem, addr)
}
