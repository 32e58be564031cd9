package unwind

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/unwound-dev/unwound/handler/cfi"
	"github.com/unwound-dev/unwound/handler/ehabi"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
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

func (u *unwinder) cfi(m *module.Module, cur state) (state, error) {
	a := u.p.Arch
	pc := lookupPC(cur) - m.Bias()
	var lastErr error = errNoCFI
	for _, t := range m.File.CFITables(pc) {
		if t == nil {
			continue
		}
		row, err := u.row(t, pc)
		if err != nil {
			if !errors.Is(err, cfi.ErrNoFDE) {
				lastErr = err
			}
			continue
		}
		if row.Regs[row.RA].Kind == cfi.RuleUndefined {
			// The outermost frame (_start, a thread's start): said
			// whatever SP is.
			return state{}, &stepError{StopEndOfStack, "return address undefined (outermost frame)"}
		}
		if cur.spApprox && spBased(row, a.SP) {
			// A frame-pointer step left only a lower bound for SP.
			return state{}, errors.New("the CFA is SP-based and SP is only known roughly")
		}
		caller, _, ra, err := row.Step(&cur.rs, u.p.Mem, a.SP, cfi.Arch{PtrSize: a.PtrSize, Order: a.Order, AArch64: a.PACStrip})
		if errors.Is(err, cfi.ErrUndefinedRA) {
			return state{}, &stepError{StopEndOfStack, "return address undefined (outermost frame)"}
		}
		if errors.Is(err, cfi.ErrRegUnknown) {
			// RISC-V vector code's rules read vlenb (DWARF 7202), which no
			// core note gives the unwinder here: this frame's rule cannot
			// be computed, other strategies may still recover it.
			return state{}, err
		}
		if err != nil {
			return state{}, &stepError{StopMemory, err.Error()}
		}
		if a.PACStrip {
			ra = a.StripPAC(ra, u.p.PACMask)
		}
		// The caller's PC comes from the return-address column; on x86 that
		// column is rip itself.
		if a.LR < 0 {
			caller.Set(a.RA, ra)
		}
		k := row.Regs[row.RA].Kind
		if a.LR >= 0 && a.LR == int(row.RA) && !row.SignalFrame {
			// DWARF gives the return-address column the caller's PC; the
			// caller's LR itself was clobbered by its call (see
			// prologueAt).
			caller.Clear(a.LR)
		}
		return state{pc: ra, rs: caller, exact: row.SignalFrame, raMem: k == cfi.RuleOffset || k == cfi.RuleExpression}, nil
	}
	return state{}, lastErr
}

var errNoCFI = errors.New("no CFI covers the pc")

// prologue decodes the frame setup of the function holding the PC, from
// its start (a symbol, or the ARM unwind entry) up to the PC.
func (u *unwinder) prologue(m *module.Module, cur state, first bool) (state, error) {
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

// ehabi runs the module's ARM EHABI entry for the frame. Entries cover up
// to the next one, so a PC in code without an entry of its own (assembly,
// PLT stubs) inherits its neighbour's rules: the caller's SP must not go
// down, and its PC must land in a module.
func (u *unwinder) ehabi(m *module.Module, cur state) (state, error) {
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

type rowKey struct {
	t  *cfi.Table
	pc uint64
}

type rowVal struct {
	row *cfi.Row
	err error
}

// row finds the unwind row for a file address, cached: a deep recursion
// asks for the same few rows a hundred thousand times.
func (u *unwinder) row(t *cfi.Table, pc uint64) (*cfi.Row, error) {
	k := rowKey{t, pc}
	if v, ok := u.rows[k]; ok {
		return v.row, v.err
	}
	fde, err := t.Lookup(pc)
	var row *cfi.Row
	if err == nil {
		row, err = t.Row(fde, pc)
	}
	if len(u.rows) >= 4096 {
		clear(u.rows)
	}
	u.rows[k] = rowVal{row, err}
	return row, err
}

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

// framePointer follows the frame record at FP, trying each of the
// architecture's record layouts. A record is taken only when its return
// address passes call-site validation; one whose call is indirect (its
// target unknown) gives a low-trust frame, since a frame pointer left
// pointing at an outer record (AArch64 -fomit-frame-pointer code keeps
// x29 untouched) looks the same.
func (u *unwinder) framePointer(f *frame) (state, error) {
	a := u.p.Arch
	cur := f.cur
	fp, ok1 := cur.rs.Get(a.FP)
	sp, ok2 := cur.rs.Get(a.SP)
	if !ok1 || !ok2 || fp == 0 || fp < sp || fp-sp > 64<<20 || fp%uint64(a.PtrSize) != 0 {
		return state{}, errors.New("no plausible frame pointer")
	}
	var why []string
	for _, rec := range a.FrameRecords {
		next, err := u.frameRecord(f, rec, fp, sp)
		if err == nil {
			return next, nil
		}
		why = append(why, rec.Name+": "+err.Error())
	}
	return state{}, errors.New(strings.Join(why, ", "))
}

func (u *unwinder) frameRecord(f *frame, rec arch.FrameRecord, fp, sp uint64) (state, error) {
	a := u.p.Arch
	cur := f.cur
	if rec.Leaf && !f.first {
		return state{}, errors.New("leaf record on an outer frame")
	}
	if int64(fp)+rec.PrevFP < int64(sp) || int64(fp)+rec.RA < int64(sp) || int64(fp)+rec.CallerSP <= int64(sp) {
		return state{}, errors.New("record below SP")
	}
	prev, err := u.readPtr(uint64(int64(fp) + rec.PrevFP))
	if err != nil {
		return state{}, err
	}
	var ra uint64
	if rec.Leaf {
		lr, ok := cur.rs.Get(a.LR)
		if !ok {
			return state{}, errors.New("no link register")
		}
		ra = lr
	} else if ra, err = u.readPtr(uint64(int64(fp) + rec.RA)); err != nil {
		return state{}, err
	}
	ra = a.StripPAC(ra, u.p.PACMask)
	callerSP := uint64(int64(fp) + rec.CallerSP)
	if prev != 0 && prev < callerSP {
		return state{}, fmt.Errorf("the previous frame pointer %#x is below the caller's SP", prev)
	}
	c, err := u.callSite(ra, cur, true)
	if err != nil {
		return state{}, err
	}
	next := state{pc: ra, rs: cur.rs, raMem: !rec.Leaf, spApprox: !rec.SPExact, weak: !c.Direct}
	next.rs.Set(a.FP, prev)
	next.rs.Set(a.SP, callerSP)
	if a.LR >= 0 {
		next.rs.Clear(a.LR)
	}
	return next, nil
}

// sigreturn recognises a signal trampoline by its instruction bytes and
// recovers the interrupted registers from the kernel's signal frame.
func (u *unwinder) sigreturn(m *module.Module, cur state) (state, bool, error) {
	sr := u.trampoline(m, cur.pc)
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
		if sp, ok = u.sigFrameBelowFP(sr, cur); !ok {
			return state{}, true, errors.New("signal frame: SP is only known roughly")
		}
	}
	next, err := u.sigframe(sr, sp)
	return next, true, err
}

// trampoline returns the signal-return trampoline whose code is at pc, nil
// when there is none; m is the module holding pc, nil outside every module.
func (u *unwinder) trampoline(m *module.Module, pc uint64) *arch.Sigreturn {
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
func (u *unwinder) sigframe(sr *arch.Sigreturn, sp uint64) (state, error) {
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
func (u *unwinder) sigFrameBelowFP(sr *arch.Sigreturn, cur state) (uint64, bool) {
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
		if h == sr.FirstRecord && u.recordsEnd(b+rec, fp) && u.kernelRecord(sr, b, fp) {
			return b, true
		}
	}
	return 0, false
}

// kernelRecord checks the frame record at fp against the signal frame at
// b: the kernel saves the interrupted frame pointer and link register in
// both.
func (u *unwinder) kernelRecord(sr *arch.Sigreturn, b, fp uint64) bool {
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
func (u *unwinder) recordsEnd(at, limit uint64) bool {
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

func hasSlot(f *prologue.Frame, reg int) bool {
	_, ok := f.Saved[reg]
	return ok
}
