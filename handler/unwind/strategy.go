package unwind

import (
	"errors"
	"fmt"

	"github.com/unwound-dev/unwound/handler/cfi"
	"github.com/unwound-dev/unwound/handler/ehabi"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// A strategy recovers the caller of one frame. Strategies are tried in the
// order the architecture lists them (arch.Arch.Strategies); the first that
// succeeds gives the frame its method and its trust.
//
// step returns errSkip when the strategy does not apply (nothing to say),
// a *stepError when the walk must end here (the tables say this is the
// outermost frame, the memory is gone), and any other error to say why it
// failed: those go into the thread's stop_detail if every strategy fails.
type strategy interface {
	name() string
	trust() Trust
	step(u *unwinder, f *frame) (state, error)
}

// frame is what the strategies know of the frame being unwound.
type frame struct {
	cur   state
	first bool           // the innermost frame, from the thread's registers
	mi    int            // module index, -1 outside every module
	m     *module.Module // nil outside every module
	// outermost: the PC is in _start, whose EHABI entry says it has no
	// caller. Heuristics do not look past it.
	outermost bool
	// cantUnwind: an EHABI entry in a module built with tables says the
	// function has no caller; only a scan confirmed by the prologue may
	// look past it.
	cantUnwind bool
}

var errSkip = errors.New("does not apply")

// strategies by the names arch.Arch.Strategies uses.
var strategies = map[string]strategy{
	MethodSignal:   signalStrategy{},
	MethodCFI:      cfiStrategy{},
	MethodEHABI:    ehabiStrategy{},
	MethodPrologue: prologueStrategy{},
	MethodLR:       lrStrategy{},
	MethodPLT:      pltStrategy{},
	MethodFP:       fpStrategy{},
	MethodScan:     scanStrategy{},
}

// strategiesFor returns an architecture's strategies, in order. Names it
// does not know are an error in package arch, caught by the tests.
func strategiesFor(a *arch.Arch, noScan bool) []strategy {
	var out []strategy
	for _, n := range a.Strategies {
		if s, ok := strategies[n]; ok && !(noScan && n == MethodScan) {
			out = append(out, s)
		}
	}
	return out
}

type signalStrategy struct{}

func (signalStrategy) name() string { return MethodSignal }
func (signalStrategy) trust() Trust { return TrustHigh }
func (signalStrategy) step(u *unwinder, f *frame) (state, error) {
	// Trampolines may sit on pages of their own, outside every file: ARM's
	// [sigpage], qemu-user's sigtramp page. Their code is in memory.
	next, ok, err := u.sigreturn(f.m, f.cur)
	if !ok {
		return state{}, errSkip
	}
	next.raMem = true
	return next, err
}

type cfiStrategy struct{}

func (cfiStrategy) name() string { return MethodCFI }
func (cfiStrategy) trust() Trust { return TrustHigh }
func (cfiStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.m == nil {
		return state{}, errSkip
	}
	if f.m.File == nil {
		if f.m.Err != nil {
			return state{}, f.m.Err
		}
		return state{}, errors.New("file not loaded")
	}
	return u.cfi(f.m, f.cur)
}

type ehabiStrategy struct{}

func (ehabiStrategy) name() string { return MethodEHABI }
func (ehabiStrategy) trust() Trust { return TrustHigh }
func (ehabiStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.m == nil || f.m.File == nil || f.m.File.EHABI == nil {
		return state{}, errSkip
	}
	next, err := u.ehabi(f.m, f.cur)
	var ne *noEntry
	if errors.As(err, &ne) && ne.cant && !f.first && f.believeCantUnwind(ne.entry, ne.end) {
		// A function without an entry of its own, in the range of an
		// EXIDX_CANTUNWIND entry of a module built with tables (libc's
		// thread start): believed as the entry would be.
		f.cantUnwind = true
	}
	var ce *cantUnwind
	if errors.As(err, &ce) && !f.first {
		// gdb ends here too: _start, clone and thread starts are
		// CANTUNWIND and save no return address. But linkers cover code
		// built without tables with such entries too: there the entry
		// says nothing, unless the PC is in _start (the ELF entry point).
		// In a module built with tables it is believed, unless a caller
		// is found whose call, callee start and saved slot all agree
		// (static binaries mix table-less program code with libc's).
		switch {
		case inStart(f.m.File.Entry&^1, lookupPC(f.cur)-f.m.Bias()):
			f.outermost = true
		case f.believeCantUnwind(ce.start, ce.end):
			f.cantUnwind = true
		}
	}
	return next, err
}

// believeCantUnwind says whether an EXIDX_CANTUNWIND entry covering
// [start, end) marks functions that really have no caller. In a module
// built mostly without tables it says nothing: GNU ld covers table-less
// code with such entries. Nor does the entry that covers the ELF entry
// point: _start's own CANTUNWIND, which ld merges with the table-less
// code around it (crt1.o, crti.o, the program's objects), so in a static
// program built without tables it spans the whole program. The
// heuristics may look past those; _start itself is still the outermost
// frame (inStart).
func (f *frame) believeCantUnwind(start, end uint64) bool {
	if f.m.File.EHABI.MostlyCantUnwind() {
		return false
	}
	entry := f.m.File.Entry &^ 1
	return entry < start || entry >= end || f.m.File.Entry == 0
}

type prologueStrategy struct{}

func (prologueStrategy) name() string { return MethodPrologue }
func (prologueStrategy) trust() Trust { return TrustMedium }
func (prologueStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.m == nil || f.m.File == nil || u.p.Arch.Prologue == nil {
		return state{}, errSkip
	}
	next, err := u.prologue(f.m, f.cur, f.first)
	if err != nil {
		return state{}, err
	}
	// The start came from a symbol; the return address must still follow
	// a call instruction.
	if _, err := u.callSite(next.pc, f.cur, false); err != nil {
		return state{}, err
	}
	return next, nil
}

type lrStrategy struct{}

func (lrStrategy) name() string { return MethodLR }
func (lrStrategy) trust() Trust { return TrustMedium }
func (lrStrategy) step(u *unwinder, f *frame) (state, error) {
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
		return u.recursion(f, c, sb)
	}
	if err != nil {
		return state{}, err
	}
	leaf := f.mi < 0 // a wild PC is no function: SP is exact there
	if start, ok := u.leafStart(f, c); ok {
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
func (u *unwinder) recursion(f *frame, c arch.Call, sb *siteBetween) (state, error) {
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
func (u *unwinder) leafStart(f *frame, c arch.Call) (uint64, bool) {
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

type fpStrategy struct{}

func (fpStrategy) name() string { return MethodFP }
func (fpStrategy) trust() Trust { return TrustMedium }
func (fpStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.outermost || f.cantUnwind || len(u.p.Arch.FrameRecords) == 0 {
		return state{}, errSkip
	}
	if f.cur.thumb && u.p.Arch.ThumbNoFP {
		return state{}, errors.New("no walkable frame pointer in Thumb code")
	}
	return u.framePointer(f)
}

type scanStrategy struct{}

func (scanStrategy) name() string { return MethodScan }
func (scanStrategy) trust() Trust { return TrustLow }
func (scanStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.outermost || f.mi < 0 {
		return state{}, errSkip
	}
	return u.scan(f.cur, f.cantUnwind)
}

// noEntry: a symbol says the function holding the PC starts after the
// EHABI entry covering it, so the entry is a neighbour's; cant says that
// entry is EXIDX_CANTUNWIND.
type noEntry struct {
	path  string
	start uint64
	cant  bool
	// entry, end: the neighbour's entry, and where its cover ends.
	entry, end uint64
}

func (e *noEntry) Error() string {
	return fmt.Sprintf("%s: no .ARM.exidx entry for the function at %#x", e.path, e.start)
}

// cantUnwind is an EHABI entry marked EXIDX_CANTUNWIND.
type cantUnwind struct {
	path       string
	start, end uint64
}

func (e *cantUnwind) Error() string {
	return fmt.Sprintf("%s: function at %#x: %v", e.path, e.start, ehabi.ErrCantUnwind)
}

func (e *cantUnwind) Unwrap() error { return ehabi.ErrCantUnwind }

// spBased says whether a CFI row computes the CFA from the stack pointer.
func spBased(r *cfi.Row, sp int) bool {
	return r.CFA.Kind == cfi.RuleCFARegOffset && int(r.CFA.Reg) == sp
}

// startSize bounds _start: glibc's is about a dozen instructions (A32)
// ending in the call to __libc_start_main; the code after it belongs
// to other functions, which an EXIDX_CANTUNWIND entry may cover too.
const startSize = 0x40

func inStart(entry, pc uint64) bool { return pc >= entry && pc-entry < startSize }
