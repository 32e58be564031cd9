package unwind

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
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

// targetBetween: a direct call's target lies between the call's own target
// and the PC. Only the sweep of direct calls (targetBefore) says so, and
// it decodes data and the middle of instructions too: on x86 a false
// target is common, and the frame's size may still prove the call right
// (scanStrategy.sized).
type targetBetween struct{ start, target uint64 }

func (e *targetBetween) Error() string {
	return fmt.Sprintf("a call targets %#x, between the call's target %#x and the pc", e.start, e.target)
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
			return &targetBetween{s + b, target}
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
	return before(u.starts(f).all, vaddr)
}

// strongBefore is targetBefore among the targets of more than one call:
// a false target, decoded from data or from the middle of an instruction,
// is hit once by chance, a function such as memset by dozens of calls.
func (u *unwinder) strongBefore(f *module.File, vaddr uint64) (uint64, bool) {
	return before(u.starts(f).strong, vaddr)
}

// callStarts are a file's direct-call targets, sorted: all of them, and
// those that several calls target.
type callStarts struct{ all, strong []uint64 }

func (u *unwinder) starts(f *module.File) callStarts {
	t, ok := u.p.targets[f]
	if !ok {
		t = callTargets(u.p.Arch, f)
		if u.p.targets == nil {
			u.p.targets = map[*module.File]callStarts{}
		}
		u.p.targets[f] = t
	}
	return t
}

// before returns the highest of the sorted addresses t at or below vaddr.
func before(t []uint64, vaddr uint64) (uint64, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i] > vaddr }) - 1
	if i < 0 {
		return 0, false
	}
	return t[i], true
}

// callTargets sweeps f's executable segment for direct calls and returns
// their targets inside the segment. Data in code may decode as a call: its
// target lands in the segment by chance only, and a false start makes
// validation refuse more, never accept more.
func callTargets(a *arch.Arch, f *module.File) callStarts {
	hits := sweep(f, a.CallTargets)
	var t callStarts
	t.all = make([]uint64, 0, len(hits))
	for a, n := range hits {
		t.all = append(t.all, a)
		// Chunks overlap by a call's size: a call there is seen twice.
		if n > 2 {
			t.strong = append(t.strong, a)
		}
	}
	sort.Slice(t.all, func(i, j int) bool { return t.all[i] < t.all[j] })
	sort.Slice(t.strong, func(i, j int) bool { return t.strong[i] < t.strong[j] })
	return t
}

// sweep runs the decoder dec over f's executable segment and returns the
// addresses it emits inside the segment, with how often each was emitted
// (saturating at 255).
func sweep(f *module.File, dec func([]byte, uint64, func(uint64))) map[uint64]uint8 {
	start, size, ok := f.Code()
	if !ok || dec == nil || size > maxSweep {
		return nil
	}
	seen := map[uint64]uint8{}
	emit := func(t uint64) {
		if t >= start && t-start < size && seen[t] < 255 {
			seen[t]++
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
	return seen
}
