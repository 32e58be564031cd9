package cfi

import (
	"errors"
	"fmt"
	"io"

	"github.com/unwound-dev/unwound/handler/regs"
)

// ErrUndefinedRA says the return address column is undefined: this is the
// outermost frame (e.g. _start's .cfi_undefined).
var ErrUndefinedRA = errors.New("cfi: return address undefined")

// Step computes the caller's registers from the callee's cur: the CFA
// first, then every rule. Registers without a rule keep their value; the
// stack pointer sp becomes the CFA unless a rule says otherwise. It returns
// the caller's registers, the CFA and the return address.
func (r *Row) Step(cur *regs.Set, mem io.ReaderAt, sp int, a Arch) (caller regs.Set, cfa uint64, ra uint64, err error) {
	if a.PtrSize != 4 && a.PtrSize != 8 {
		return caller, 0, 0, fmt.Errorf("cfi: pointer size %d", a.PtrSize)
	}
	if r.RA < 0 || r.RA >= regs.Max {
		return caller, 0, 0, fmt.Errorf("cfi: return address column %d", r.RA)
	}
	ctx := &EvalContext{Regs: cur, Mem: mem, PtrSize: a.PtrSize, Order: a.Order}
	switch r.CFA.Kind {
	case RuleCFARegOffset:
		v, ok := cur.Get(int(r.CFA.Reg))
		if r.CFA.Reg >= regs.Max || !ok {
			return caller, 0, 0, fmt.Errorf("cfi: CFA register %d unknown (%w)", r.CFA.Reg, ErrRegUnknown)
		}
		cfa = v + uint64(r.CFA.Offset)
	case RuleCFAExpression:
		if cfa, err = Eval(r.CFA.Expr, ctx); err != nil {
			return caller, 0, 0, err
		}
	default:
		return caller, 0, 0, errors.New("cfi: no CFA rule")
	}
	if a.PtrSize == 4 {
		cfa &= 0xffffffff
	}
	if ra := r.Regs[r.RA]; ra.Kind == RuleUndefined {
		return caller, cfa, 0, ErrUndefinedRA
	}
	caller = *cur
	caller.Set(sp, cfa)
	var buf [8]byte
	load := func(addr uint64) (uint64, error) {
		p := buf[:a.PtrSize]
		if mem == nil {
			return 0, fmt.Errorf("cfi: no memory to read the saved register at %#x", addr)
		}
		if _, err := mem.ReadAt(p, int64(addr)); err != nil {
			return 0, fmt.Errorf("cfi: reading saved register at %#x: %w", addr, err)
		}
		if a.PtrSize == 4 {
			return uint64(a.Order.Uint32(p)), nil
		}
		return a.Order.Uint64(p), nil
	}
	ctx.Initial = []uint64{cfa}
	for n := range r.Regs {
		rule := &r.Regs[n]
		var v uint64
		switch rule.Kind {
		case RuleUnset, RuleSameValue:
			continue
		case RuleUndefined:
			caller.Clear(n)
			continue
		case RuleOffset:
			if v, err = load(cfa + uint64(rule.Offset)); err != nil {
				return caller, cfa, 0, err
			}
		case RuleValOffset:
			v = cfa + uint64(rule.Offset)
		case RuleRegister:
			var ok bool
			if v, ok = cur.Get(int(rule.Reg)); !ok {
				caller.Clear(n)
				continue
			}
		case RuleExpression, RuleValExpression:
			ctx.Initial = ctx.Initial[:1]
			x, err := Eval(rule.Expr, ctx)
			if err != nil {
				return caller, cfa, 0, err
			}
			v = x
			if rule.Kind == RuleExpression {
				if v, err = load(x); err != nil {
					return caller, cfa, 0, err
				}
			}
		}
		caller.Set(n, v)
	}
	ra, ok := caller.Get(r.RA)
	if !ok {
		return caller, cfa, 0, fmt.Errorf("cfi: return address register %d: %w", r.RA, ErrRegUnknown)
	}
	return caller, cfa, ra, nil
}
