package unwind

import (
	"errors"
	"fmt"

	"github.com/unwound-dev/unwound/handler/ehabi"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// ehabi runs the module's ARM EHABI entry for the frame. Entries cover up
// to the next one, so a PC in code without an entry of its own (assembly,
// PLT stubs) inherits its neighbour's rules: the caller's SP must not go
// down, and its PC must land in a module.
func (ehabiStrategy) ehabi(u *unwinder, m *module.Module, cur state) (state, error) {
	a := u.p.Arch
	pc := lookupPC(cur) - m.Bias()
	e, err := m.File.EHABI.Lookup(pc)
	if err != nil && !errors.Is(err, ehabi.ErrCantUnwind) {
		return state{}, err
	}
	// Entries run to the next one: a function the table leaves out (glibc's
	// abort) would inherit its neighbour's program, or its CANTUNWIND
	// (_start's, before a program's own code). A symbol starting after
	// the entry says the entry is not this function's.
	if fs, ok := m.File.FuncStart(pc); ok && fs > e.Start {
		return state{}, &noEntry{m.Path, fs, err != nil, e.Start, e.End}
	}
	// Stripped, a function many calls target says the same: mold leaves
	// no EXIDX_CANTUNWIND over code without entries (glibc's memset, in
	// assembly), so memset took __pthread_unwind_next's program, 22 KiB
	// below, at high trust.
	if fs, ok := u.strongBefore(m.File, pc); ok && fs > e.Start {
		return state{}, &noEntry{m.Path, fs, err != nil, e.Start, e.End}
	}
	if err != nil {
		return state{}, &cantUnwind{m.Path, e.Start, e.End}
	}
	if cur.spApprox {
		return state{}, errors.New("EHABI: SP is only known roughly")
	}
	var s ehabi.State
	for r := 0; r < 16; r++ {
		if v, ok := cur.rs.Get(r); ok {
			s.R[r] = uint32(v)
			s.Valid |= 1 << r
		}
	}
	s.R[15] = uint32(cur.pc)
	s.Valid |= 1 << 15
	if err := ehabi.Exec(e.Ops, &s, u.p.Mem, a.Order); err != nil {
		if errors.Is(err, ehabi.ErrRefuse) {
			return state{}, &stepError{StopEndOfStack, "EHABI entry refuses to unwind"}
		}
		return state{}, err
	}
	var next state
	next.rs = cur.rs
	// The return address came from the stack when pc, or the lr it is
	// taken from, was popped: a recursion, not a rule that loops.
	next.raMem = s.PCSet || s.Popped&(1<<a.LR) != 0
	for r := 0; r < 16; r++ {
		if s.Valid&(1<<r) != 0 {
			next.rs.Set(r, uint64(s.R[r]))
		}
	}
	next.pc = uint64(s.R[15])
	sp, _ := cur.rs.Get(a.SP)
	if uint64(s.R[13]) < sp {
		return state{}, fmt.Errorf("EHABI: caller SP %#x below SP %#x", s.R[13], sp)
	}
	if cur.exact && outsideBody(u.p.Arch, m, cur, e.Start, pc, uint64(s.R[13])-sp) {
		return state{}, fmt.Errorf("EHABI: the pc %#x is in a prologue or an epilogue, where the entry's program does not hold", cur.pc)
	}
	if next.pc != 0 && module.Find(u.p.Modules, next.pc&^1) < 0 {
		return state{}, errors.New("EHABI: the return address is in no module")
	}
	// When the return address came from LR (no opcode popped pc), LR still
	// holds it: it says nothing about the caller's own return address.
	if !s.PCSet {
		next.rs.Clear(a.LR)
	}
	return next, nil
}

// outsideBody says whether an interrupted PC (frame 0, or the one a signal
// frame restores) stands where its entry's program, which undoes the
// whole prologue (popped bytes of stack), does not hold: in the prologue
// before it has pushed all of that, or in an epilogue after it has given
// some back (add sp then pop {..., pc}; pop {..., lr} then bx lr). Run
// there, the program would take the caller's words for saved registers
// and a return address, at high trust. A return address is a call site,
// where the prologue has run: only an exact PC can be here. The function's
// code from the entry's start to the PC is decoded as the prologue
// strategy does; where it cannot say (too far, a computed frame, no path)
// the entry holds, as before.
func outsideBody(a *arch.Arch, m *module.Module, cur state, start, pc, popped uint64) bool {
	if a.Prologue == nil || pc < start || pc-start > prologue.MaxCode {
		return false
	}
	if pc == start {
		return popped > 0 // nothing pushed yet
	}
	code := make([]byte, pc-start)
	if m.File.ReadCode(start, code) != nil {
		return false
	}
	f, err := a.Prologue(code, start, pc, cur.thumb)
	if errors.Is(err, prologue.ErrNoPrologue) {
		return popped > 0
	}
	return err == nil && !f.Dynamic && f.Size < popped
}

type ehabiStrategy struct{}

func (ehabiStrategy) name() string { return MethodEHABI }
func (ehabiStrategy) trust() Trust { return TrustHigh }
func (strat ehabiStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.m == nil || f.m.File == nil || f.m.File.EHABI == nil {
		return state{}, errSkip
	}
	next, err := strat.ehabi(u, f.m, f.cur)
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

// startSize bounds _start: glibc's is about a dozen instructions (A32)
// ending in the call to __libc_start_main; the code after it belongs
// to other functions, which an EXIDX_CANTUNWIND entry may cover too.
const startSize = 0x40

func inStart(entry, pc uint64) bool { return pc >= entry && pc-entry < startSize }
