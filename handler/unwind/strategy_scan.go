package unwind

import (
	"errors"
	"fmt"
	"sort"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

type scanStrategy struct{}

func (scanStrategy) name() string { return MethodScan }
func (scanStrategy) trust() Trust { return TrustLow }
func (strat scanStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.outermost || f.mi < 0 {
		return state{}, errSkip
	}
	return strat.scan(u, f.cur, f.cantUnwind)
}

// takenBefore returns the highest address-taken function start at or
// below the file address vaddr in f's code (arch.Taken): constants that
// point into the code at bytes that open a frame.
func (scanStrategy) takenBefore(u *unwinder, f *module.File, vaddr uint64) (uint64, bool) {
	a := u.p.Arch
	t, ok := u.p.taken[f]
	if !ok {
		code := make([]byte, 8)
		for s := range sweep(f, a.Taken) {
			if f.ReadCode(s, code) == nil && a.Entry != nil && a.Entry(code) {
				t = append(t, s)
			}
		}
		sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
		if u.p.taken == nil {
			u.p.taken = map[*module.File][]uint64{}
		}
		u.p.taken[f] = t
	}
	return before(t, vaddr)
}

// frameSlot returns where the return address of cur's frame lies, from the
// size of the frame the prologue of its function made (arch.FrameSize),
// the function's start being the highest known one below the PC: direct
// call targets, symbols, table entries and address-taken starts.
func (strat scanStrategy) frameSlot(u *unwinder, cur state) (uint64, bool) {
	a := u.p.Arch
	if a.FrameSize == nil || cur.spApprox {
		return 0, false
	}
	mi, m := u.module(cur.pc)
	if mi < 0 || m.File == nil {
		return 0, false
	}
	b := m.Bias()
	pc := lookupPC(cur) - b
	s, ok := u.funcStart(m.File, pc)
	if t, tok := strat.takenBefore(u, m.File, pc); tok && (!ok || t > s) {
		s, ok = t, true
	}
	if !ok {
		return 0, false
	}
	// The bytes before the PC only: in frame 0 a prologue may be half done.
	n := min(cur.pc-b-s, arch.MaxPrologue)
	code := make([]byte, n)
	if m.File.ReadCode(s, code) != nil {
		return 0, false
	}
	size, ok := a.FrameSize(code)
	sp, spok := cur.rs.Get(a.SP)
	if !ok || !spok {
		return 0, false
	}
	return sp + size, true
}

// Scan bounds: how far above SP a return address is looked for, and how
// much is read at a time.
const (
	maxScan   = 16 << 10
	scanChunk = 512
)

// scan walks up the stack from SP and takes the first word that passes
// call-site validation as the return address. It knows nothing of the
// frame's layout: the caller's registers are unknown but for SP, just
// above the slot. With confirmedOnly, only a word the callee's prologue
// confirms is taken.
func (strat scanStrategy) scan(u *unwinder, cur state, confirmedOnly bool) (state, error) {
	a := u.p.Arch
	sp, ok := cur.rs.Get(a.SP)
	if !ok {
		return state{}, errors.New("no stack pointer")
	}
	ps := uint64(a.PtrSize)
	sp = (sp + ps - 1) &^ (ps - 1)
	buf := make([]byte, scanChunk)
	var rejected int
	var guess *state // the first word that passed, unconfirmed
	var want uint64  // the return address's slot by the frame's size, above the guess
	for off := uint64(0); off < maxScan; off += scanChunk {
		n, _ := u.p.Mem.ReadAt(buf, int64(sp+off))
		if n < int(ps) {
			break
		}
		for i := 0; i+int(ps) <= n; i += int(ps) {
			var w uint64
			if ps == 4 {
				w = uint64(a.Order.Uint32(buf[i:]))
			} else {
				w = a.Order.Uint64(buf[i:])
			}
			w = a.StripPAC(w, u.p.PACMask)
			if w < a.MinInsn {
				continue
			}
			at := w // the code address: ARM's carries the state in bit 0
			if a.ThumbBit {
				at &^= 1
			}
			if module.Find(u.p.Modules, at) < 0 && !u.isTrampoline(at) {
				// Not code, unless a signal trampoline outside every
				// module ([sigpage], qemu-user's sigtramp page).
				continue
			}
			if m := u.unchecked(at); m != nil {
				// A return address there could be neither taken nor told
				// from data: a word above it would skip its frame.
				return state{}, fmt.Errorf("at %#x: %#x may be a return address into %s, whose file is not loaded", sp+off+uint64(i), at, m.Path)
			}
			c, err := u.callSite(w, cur, true)
			slot := sp + off + uint64(i)
			var tb *targetBetween
			if errors.As(err, &tb) && strat.sized(u, c, cur, slot) {
				// The function the call names puts its return address in
				// this very slot: the start between was a false one.
				err = nil
			}
			var sb *siteBetween
			if errors.As(err, &sb) {
				// A recursion, if the function's prologue saved its return
				// address in this very slot.
				if next, ok, _ := strat.confirm(u, c, cur, slot); ok {
					return next, nil
				}
				if strat.selfCall(u, c, cur, w) {
					// Where calls push the return address and no prologue
					// is decoded (x86), a call to the very function the PC
					// is in, from inside it: words above SP are the
					// function's own frame and its caller's, where a stale
					// address of its own calls is not left. A guess.
					next := state{pc: w, raMem: true, selfCall: true}
					next.rs.Set(a.SP, slot+ps)
					return next, nil
				}
			}
			if guess != nil && a.Prologue == nil {
				if slot == want && err == nil && !u.isTrampoline(at) {
					// The slot the function's prologue says its return
					// address is in: the guess below it was a stale word
					// in the frame's locals.
					next := state{pc: w, raMem: true}
					next.rs.Set(a.SP, slot+ps)
					return next, nil
				}
				continue // only a recursion's word, or the frame's own slot, overrides the guess
			}
			if err != nil {
				rejected++
				continue
			}
			sigSP, err := u.scannedSigframe(at, slot)
			if err != nil && !a.RASlotTop {
				// The handler's return address, most likely, and the
				// words above it the signal frame's saved registers:
				// taking one of those would skip the frames between.
				return state{}, fmt.Errorf("at %#x: %w", slot, err)
			}
			if err != nil {
				rejected++
				continue
			}
			if sigSP != 0 {
				// The signal frame is placed: the trampoline's SP is
				// known exactly, whatever the architecture's frames.
				next := state{pc: w, raMem: true}
				next.rs.Set(a.SP, sigSP)
				return next, nil
			}
			next, ok, err := strat.confirm(u, c, cur, slot)
			if err != nil {
				rejected++
				continue
			}
			if ok {
				return next, nil
			}
			if confirmedOnly {
				rejected++
				continue
			}
			if guess != nil {
				continue
			}
			guess = &state{pc: w, spApprox: !a.RASlotTop, raMem: true}
			guess.rs.Set(a.SP, slot+ps)
			if a.Prologue == nil && c.Direct {
				return *guess, nil
			}
			if s, ok := strat.frameSlot(u, cur); ok && s > slot {
				want = s
			}
			// An indirect call's word names no callee: where no prologue
			// is decoded (x86), a recursion's word further up says it is
			// a stale one (a return address left in the frame's locals).
			// A prologue-confirmed word further up would say where the
			// callee saved its return address: everything below that
			// slot is the callee's own frame, this word a stale one
			// (a return address left by an earlier call through a
			// pointer, which nothing can check). Look on for one.
		}
		if n < len(buf) {
			break
		}
	}
	if guess != nil {
		return *guess, nil
	}
	return state{}, fmt.Errorf("no return address in %d bytes above SP (%d code addresses failed call-site validation)", maxScan, rejected)
}

// selfCall reports whether c, a direct call before the scanned word w, calls the
// function the frame's PC is in from inside it (a recursion), on an
// architecture whose calls push the return address and which has no
// prologue analyzer to confirm the slot.
func (scanStrategy) selfCall(u *unwinder, c arch.Call, cur state, w uint64) bool {
	a := u.p.Arch
	if a.LR >= 0 || a.Prologue != nil || !c.Direct || cur.spApprox {
		return false
	}
	mi, m := u.module(cur.pc)
	if mi < 0 || m.File == nil || module.Find(u.p.Modules, c.Target) != mi {
		return false
	}
	fs, ok := u.funcStart(m.File, lookupPC(cur)-m.Bias())
	if !ok || fs != c.Target-m.Bias() {
		return false
	}
	// The word must be a return address into the function, not the start
	// of the next one after a call that does not return (main after
	// main.cold's call to abort's caller), nor a pointer to it: with the
	// PC's own start unknown, the call's target would pass for it.
	code := make([]byte, 4)
	return a.Entry == nil || u.readCode(m, w, code) != nil || !a.Entry(code)
}

// confirm checks a return address found at slot against the prologue of
// the function its direct call targets: the callee's start. When the
// prologue decodes, it must have saved the return address in that very
// slot; the frame is then the prologue's (medium trust: the call site, the
// callee's start and the slot all agree). ok is false when the prologue
// says nothing either way.
func (scanStrategy) confirm(u *unwinder, c arch.Call, cur state, slot uint64) (state, bool, error) {
	a := u.p.Arch
	if !c.Direct || a.Prologue == nil || cur.spApprox {
		return state{}, false, nil
	}
	mi, m := u.module(cur.pc)
	if mi < 0 || m.File == nil || module.Find(u.p.Modules, c.Target) != mi {
		return state{}, false, nil
	}
	next, fr, err := u.prologueAt(m, cur, c.Target-m.Bias(), false)
	switch {
	case errors.Is(err, prologue.ErrWrongStart):
		return state{}, false, err
	case err != nil:
		return state{}, false, nil
	}
	sp, _ := cur.rs.Get(a.SP)
	cfa, _ := fr.CFA(sp, cur.rs.Get) // prologueAt computed it already
	off, saved := fr.Saved[a.RA]
	if !saved || uint64(int64(cfa)+off) != slot {
		return state{}, false, fmt.Errorf("the prologue at %#x saves the return address elsewhere", c.Target)
	}
	next.via = MethodPrologue
	next.raMem = true
	return next, true, nil
}

// sized reports whether the prologue of the function a direct call c
// targets, decoded up to the frame's PC, leaves the return address in
// slot (arch.FrameSize): where no prologue analyzer runs (x86), that
// the call names the frame's function and its frame ends at this very
// word is what confirms it.
func (scanStrategy) sized(u *unwinder, c arch.Call, cur state, slot uint64) bool {
	a := u.p.Arch
	if a.FrameSize == nil || !c.Direct || cur.spApprox || c.Target > cur.pc {
		return false
	}
	mi, m := u.module(cur.pc)
	if mi < 0 || m.File == nil || module.Find(u.p.Modules, c.Target) != mi {
		return false
	}
	code := make([]byte, min(cur.pc-c.Target, arch.MaxPrologue))
	if m.File.ReadCode(c.Target-m.Bias(), code) != nil {
		return false
	}
	size, ok := a.FrameSize(code)
	sp, _ := cur.rs.Get(a.SP)
	return ok && sp+size == slot
}
