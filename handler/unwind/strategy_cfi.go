package unwind

import (
	"errors"

	"github.com/unwound-dev/unwound/handler/cfi"
	"github.com/unwound-dev/unwound/handler/module"
)

func (strat cfiStrategy) cfi(u *unwinder, m *module.Module, cur state) (state, error) {
	a := u.p.Arch
	pc := lookupPC(cur) - m.Bias()
	var lastErr error = errNoCFI
	for _, t := range m.File.CFITables(pc) {
		if t == nil {
			continue
		}
		row, err := strat.row(u, t, pc)
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
func (cfiStrategy) row(u *unwinder, t *cfi.Table, pc uint64) (*cfi.Row, error) {
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

type cfiStrategy struct{}

func (cfiStrategy) name() string { return MethodCFI }
func (cfiStrategy) trust() Trust { return TrustHigh }
func (strat cfiStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.m == nil {
		return state{}, errSkip
	}
	if f.m.File == nil {
		if f.m.Err != nil {
			return state{}, f.m.Err
		}
		return state{}, errors.New("file not loaded")
	}
	return strat.cfi(u, f.m, f.cur)
}

// spBased says whether a CFI row computes the CFA from the stack pointer.
func spBased(r *cfi.Row, sp int) bool {
	return r.CFA.Kind == cfi.RuleCFARegOffset && int(r.CFA.Reg) == sp
}
