package unwind

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
)

// callSite validates a candidate return address ra for the frame callee
// (DESIGN.md §10): ra must be in code and follow a call instruction; when
// reach is set and the call is direct, its target must be able to reach
// the callee's PC: at or below it, in the same module (or a PLT stub that
// jumps on), with no known function start in between, and the call site
// itself not between the two (that would be a return address of the
// callee's own function, left in LR by a call it made). A return address
// at a signal trampoline passes: the kernel, not a call, put it there.
//
// On ARM, ra carries the caller's instruction set in bit 0.
func (u *unwinder) callSite(ra uint64, callee state, reach bool) (arch.Call, error) {
	a := u.p.Arch
	thumb := false
	if a.ThumbBit {
		thumb = ra&1 != 0
		ra &^= 1
	}
	// The call is in code, the address after it may not be: a noreturn
	// call as the last instruction of a segment returns past its end.
	mi, m := u.module(ra - 1)
	if mi < 0 || !m.InCode(ra-1) {
		if u.isTrampoline(ra) {
			return arch.Call{Direct: true}, nil
		}
		return arch.Call{}, fmt.Errorf("return address %#x is not in code", ra)
	}
	if a.Call == nil {
		return arch.Call{}, errors.New("no call-site decoder")
	}
	var buf [arch.MaxCallSize]byte
	before := buf[:]
	for len(before) >= 2 && u.readCode(m, ra-uint64(len(before)), before) != nil {
		before = before[len(before)/2:]
	}
	c, ok := a.Call(before, ra, thumb)
	if !ok {
		if u.isTrampoline(ra) {
			return arch.Call{Direct: true}, nil
		}
		return arch.Call{}, fmt.Errorf("no call instruction before the return address %#x", ra)
	}
	if reach && !c.Direct {
		// An indirect call names no callee; but a call inside the very
		// function the PC is in, before the PC, left this address by a
		// call of its own (a stale word in its frame, or LR reused).
		site := ra - uint64(c.Size)
		if pc := lookupPC(callee); site < pc && module.Find(u.p.Modules, pc) == mi && m.File != nil {
			if fs, ok := u.funcStart(m.File, pc-m.Bias()); ok && fs <= site-m.Bias() {
				return c, fmt.Errorf("the call at %#x lies in the function of the pc, before it", site)
			}
		}
	}
	if !reach || !c.Direct {
		return c, nil
	}
	pc := lookupPC(callee)
	tm, tmod := u.module(c.Target)
	if tm < 0 {
		return c, fmt.Errorf("the call at %#x targets %#x, in no module", ra-uint64(c.Size), c.Target)
	}
	cm := module.Find(u.p.Modules, pc)
	if a.PLT != nil {
		code := make([]byte, 12)
		if u.readCode(tmod, c.Target, code) == nil && a.PLT(code) {
			// A PLT stub jumps on to another module: the callee's PC must
			// be in another module than the stub (a return address left
			// by the callee's own calls through its PLT would pass else).
			// In a static program the stubs are IFUNCs' (memcpy's): they
			// jump within it, to a callee the call does not name, as an
			// indirect call would.
			if tm == cm && tmod.File != nil && !tmod.File.Dynamic {
				c.Direct = false
				return c, nil
			}
			if tm == cm {
				return c, fmt.Errorf("the call at %#x goes through a PLT stub, and the pc is in the same module", ra-uint64(c.Size))
			}
			return c, nil
		}
	}
	site := ra - uint64(c.Size)
	err := u.reaches(tmod, tm != cm, site, c.Target, pc)
	if err != nil && a.TailIndirect != nil && tmod.File != nil {
		code := make([]byte, arch.MaxIndirectTail)
		if tmod.File.ReadCode(c.Target-tmod.Bias(), code) == nil && a.TailIndirect(code, c.TargetThumb) {
			// The callee passes control on through a register (musl's
			// __libc_start_main to libc_start_main_stage2): the call
			// reaches functions it does not name, as an indirect one.
			c.Direct = false
			return c, nil
		}
	}
	if err == nil || a.TailBranch == nil {
		return c, err
	}
	// A function that only passes its arguments on jumps to another
	// (musl's __syscall_cp to __syscall_cp_c, pthread_cond_wait to
	// pthread_cond_timedwait): the call reaches the jump's target too,
	// and that is the callee whose PC this is.
	t := c.Target
	for i := 0; i < maxTail; i++ {
		code := make([]byte, arch.MaxTailCode)
		if u.readCode(tmod, t, code) != nil {
			break
		}
		next, ok := a.TailBranch(code, t)
		if !ok || module.Find(u.p.Modules, next) != tm {
			break
		}
		if u.reaches(tmod, tm != cm, site, next, pc) == nil {
			c.Target = next
			return c, nil
		}
		t = next
	}
	return c, err
}

// unchecked returns the module holding pc when its file could not be
// loaded and pc may be in its code: its mapping is executable, or the
// core did not say (NT_FILE gives no permissions). nil otherwise.
func (u *unwinder) unchecked(pc uint64) *module.Module {
	mi, m := u.module(pc)
	if mi < 0 || m.File != nil || m.Err == nil {
		return nil
	}
	for _, mp := range m.Maps {
		if pc >= mp.Start && pc < mp.End {
			if mp.Perms == "" || strings.Contains(mp.Perms, "x") {
				return m
			}
			return nil
		}
	}
	return m
}

// siteBetween: a direct call lies between its own target and the PC it is
// said to reach. A return address the function left in LR by a call of
// its own looks like that; so does a recursion's. Only the prologue of the
// target, saving the return address in the very slot it was found in,
// tells them apart (recursive).
type siteBetween struct{ site uint64 }

func (e *siteBetween) Error() string {
	return fmt.Sprintf("the call at %#x lies between its target and the pc", e.site)
}

// maxTail bounds the jumps followed from a call's target.
const maxTail = 2

// reaches says why a direct call from site to target cannot have led to
// pc (nil when it can): target in another module, above the pc, the call
// site between the two, or a known function start between them.
func (u *unwinder) reaches(tmod *module.Module, otherModule bool, site, target, pc uint64) error {
	switch {
	case otherModule:
		return fmt.Errorf("the call at %#x targets %#x, another module than the pc", site, target)
	case target > pc:
		return fmt.Errorf("the call at %#x targets %#x, above the pc", site, target)
	case site >= target && site <= pc:
		return &siteBetween{site}
	}
	if tmod.File == nil && tmod.Err != nil {
		// The file could not be loaded (missing, unreadable, or not read
		// before the deadline): no function start is known, and any call
		// below the PC would pass. Refused: that gave wrong frames.
		return fmt.Errorf("the call at %#x cannot be checked: %v", site, tmod.Err)
	}
	if tmod.File != nil {
		b := tmod.Bias()
		if s, ok := tmod.File.StartBefore(pc - b); ok && s > target-b {
			return fmt.Errorf("a function starts at %#x, between the call's target %#x and the pc", s+b, target)
		}
		if s, ok := u.targetBefore(tmod.File, pc-b); ok && s > target-b {
			return fmt.Errorf("a call targets %#x, between the call's target %#x and the pc", s+b, target)
		}
	}
	return nil
}

// funcStart returns the highest known function start at or below the file
// address vaddr: symbols, table entries, or direct-call targets.
func (u *unwinder) funcStart(f *module.File, vaddr uint64) (uint64, bool) {
	s, ok := f.StartBefore(vaddr)
	if t, tok := u.targetBefore(f, vaddr); tok && (!ok || t > s) {
		s, ok = t, true
	}
	return s, ok
}

// Bounds of the sweep for call targets: code segments above maxSweep are
// not swept, and code is read sweepChunk bytes at a time.
const (
	maxSweep   = 32 << 20
	sweepChunk = 64 << 10
)

// targetBefore returns the highest direct-call target at or below the file
// address vaddr in f's code. Every direct call names a function start, so
// in a stripped file without symbols or tables (musl's libc, static
// programs built with it) these are the starts call-site validation has:
// without them, a return address whose call targets any function below
// the PC would reach it, and a scan would skip the frames of functions
// that tail-called on (musl's __syscall_cp, pthread_cond_wait).
func (u *unwinder) targetBefore(f *module.File, vaddr uint64) (uint64, bool) {
	t, ok := u.p.targets[f]
	if !ok {
		t = callTargets(u.p.Arch, f)
		if u.p.targets == nil {
			u.p.targets = map[*module.File][]uint64{}
		}
		u.p.targets[f] = t
	}
	i := sort.Search(len(t), func(i int) bool { return t[i] > vaddr }) - 1
	if i < 0 {
		return 0, false
	}
	return t[i], true
}

// callTargets sweeps f's executable segment for direct calls and returns
// their targets inside the segment, sorted. Data in code may decode as a
// call: its target lands in the segment by chance only, and a false start
// makes validation refuse more, never accept more.
func callTargets(a *arch.Arch, f *module.File) []uint64 {
	return sweep(f, a.CallTargets, nil)
}

// sweep runs the decoder dec over f's executable segment and returns the
// addresses it emits inside the segment (that keep passes, when set),
// sorted.
func sweep(f *module.File, dec func([]byte, uint64, func(uint64)), keep func(uint64) bool) []uint64 {
	start, size, ok := f.Code()
	if !ok || dec == nil || size > maxSweep {
		return nil
	}
	seen := map[uint64]bool{}
	emit := func(t uint64) {
		if t >= start && t-start < size {
			seen[t] = true
		}
	}
	buf := make([]byte, arch.MaxCallSize+sweepChunk)
	for off := uint64(0); off < size; off += sweepChunk {
		// Each chunk starts MaxCallSize bytes early (a multiple of every
		// alignment), so that a call across the boundary is seen.
		lo := off - min(off, arch.MaxCallSize)
		hi := min(off+sweepChunk, size)
		code := buf[:hi-lo]
		if f.ReadCode(start+lo, code) != nil {
			continue
		}
		dec(code, start+lo, emit)
	}
	out := make([]uint64, 0, len(seen))
	for t := range seen {
		if keep == nil || keep(t) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// takenBefore returns the highest address-taken function start at or
// below the file address vaddr in f's code (arch.Taken): constants that
// point into the code at bytes that open a frame.
func (u *unwinder) takenBefore(f *module.File, vaddr uint64) (uint64, bool) {
	a := u.p.Arch
	t, ok := u.p.taken[f]
	if !ok {
		code := make([]byte, 8)
		t = sweep(f, a.Taken, func(s uint64) bool {
			return f.ReadCode(s, code) == nil && a.Entry != nil && a.Entry(code)
		})
		if u.p.taken == nil {
			u.p.taken = map[*module.File][]uint64{}
		}
		u.p.taken[f] = t
	}
	i := sort.Search(len(t), func(i int) bool { return t[i] > vaddr }) - 1
	if i < 0 {
		return 0, false
	}
	return t[i], true
}

// frameSlot returns where the return address of cur's frame lies, from the
// size of the frame the prologue of its function made (arch.FrameSize),
// the function's start being the highest known one below the PC: direct
// call targets, symbols, table entries and address-taken starts.
func (u *unwinder) frameSlot(cur state) (uint64, bool) {
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
	if t, tok := u.takenBefore(m.File, pc); tok && (!ok || t > s) {
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

// isTrampoline reports whether code at pc is a signal-return trampoline.
func (u *unwinder) isTrampoline(pc uint64) bool {
	mi, m := u.module(pc)
	if mi < 0 {
		m = nil
	}
	return u.trampoline(m, pc) != nil
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
func (u *unwinder) scan(cur state, confirmedOnly bool) (state, error) {
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
			var sb *siteBetween
			if errors.As(err, &sb) {
				// A recursion, if the function's prologue saved its return
				// address in this very slot.
				if next, ok, _ := u.confirm(c, cur, slot); ok {
					return next, nil
				}
				if u.selfCall(c, cur, w) {
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
			next, ok, err := u.confirm(c, cur, slot)
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
			if s, ok := u.frameSlot(cur); ok && s > slot {
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
func (u *unwinder) selfCall(c arch.Call, cur state, w uint64) bool {
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
func (u *unwinder) confirm(c arch.Call, cur state, slot uint64) (state, bool, error) {
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
	sr := u.trampoline(m, ra)
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
		if s, ok := u.sigFrameBelowFP(sr, probe); ok {
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
	ctx, err := u.sigframe(sr, sigSP)
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
	if rec != 0 && !u.kernelRecord(sr, sigSP, rec) {
		return 0, fmt.Errorf("signal frame at %#x: the record after it does not repeat the interrupted frame pointer and link register", sigSP)
	}
	return sigSP, nil
}
