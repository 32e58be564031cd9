package cfi

import (
	"fmt"
	"math/bits"

	"github.com/unwound-dev/unwound/handler/unwind/regs"
)

// RuleKind says how to recover a register (DWARF 5 §6.4.1).
type RuleKind uint8

const (
	RuleUnset         RuleKind = iota // no rule: the register keeps its value
	RuleUndefined                     // not recoverable
	RuleSameValue                     // unchanged
	RuleOffset                        // saved at CFA+Offset
	RuleValOffset                     // value is CFA+Offset
	RuleRegister                      // in register Reg
	RuleExpression                    // saved at the address Expr computes
	RuleValExpression                 // value is what Expr computes
	RuleCFARegOffset                  // CFA only: Reg+Offset
	RuleCFAExpression                 // CFA only: Expr
)

var ruleNames = [...]string{"unset", "undefined", "same", "offset", "val_offset", "register", "expression", "val_expression", "reg+off", "cfa_expression"}

func (k RuleKind) String() string {
	if int(k) < len(ruleNames) {
		return ruleNames[k]
	}
	return fmt.Sprintf("rule(%d)", k)
}

// Rule is one register's (or the CFA's) recovery rule.
type Rule struct {
	Kind   RuleKind
	Reg    uint64
	Offset int64
	Expr   []byte
}

// Row is the unwind table row for one PC.
type Row struct {
	Loc         uint64 // first address the row applies to
	CFA         Rule
	Regs        [regs.Max]Rule
	RA          int  // return address column
	SignalFrame bool // CIE 'S': the caller's PC is exact, not a return address
	RASigned    bool // AArch64: return address signed with PAC
	ArgsSize    uint64
}

// Limits on running instructions: real FDEs have a few dozen.
const (
	maxInsns       = 1 << 16
	maxRememberDep = 64
)

// DW_CFA opcodes, DWARF 5 §6.4.2 and GNU extensions.
const (
	cfaAdvanceLoc  = 0x40
	cfaOffset      = 0x80
	cfaRestore     = 0xc0
	cfaNop         = 0x00
	cfaSetLoc      = 0x01
	cfaAdvanceLoc1 = 0x02
	cfaAdvanceLoc2 = 0x03
	cfaAdvanceLoc4 = 0x04
	cfaOffsetExt   = 0x05
	cfaRestoreExt  = 0x06
	cfaUndefined   = 0x07
	cfaSameValue   = 0x08
	cfaRegister    = 0x09
	cfaRemember    = 0x0a
	cfaRestoreSt   = 0x0b
	cfaDefCFA      = 0x0c
	cfaDefCFAReg   = 0x0d
	cfaDefCFAOff   = 0x0e
	cfaDefCFAExpr  = 0x0f
	cfaExpression  = 0x10
	cfaOffsetExtSf = 0x11
	cfaDefCFASf    = 0x12
	cfaDefCFAOffSf = 0x13
	cfaValOffset   = 0x14
	cfaValOffSf    = 0x15
	cfaValExpr     = 0x16
	cfaAdvLoc8     = 0x1d // MIPS
	cfaGNUWindow   = 0x2d // AArch64 negate_ra_state; SPARC window_save
	cfaGNUArgsSize = 0x2e
	cfaGNUNegOff   = 0x2f
)

// Row runs the CIE's initial instructions, then the FDE's while the
// location is not past pc, and returns the row in effect at pc. As in
// libgcc and GDB, the location starts at the FDE's start, an advance in
// the CIE's instructions carries over into the FDE's, and no instruction
// after an advance past pc runs.
func (t *Table) Row(f *FDE, pc uint64) (*Row, error) {
	if pc < f.Start || pc >= f.End {
		return nil, ErrNoFDE
	}
	row := &Row{RA: int(f.CIE.RA), SignalFrame: f.CIE.Signal, Loc: f.Start}
	if f.CIE.RA >= regs.Max {
		return nil, t.errf(f.CIE.Off, "return address column %d", f.CIE.RA)
	}
	x := &exec{t: t, cie: f.CIE, row: row, loc: f.Start}
	if err := x.run(f.CIE.Initial, t.addr+f.CIE.initialOff, pc, true); err != nil {
		return nil, t.errf(f.CIE.Off, "CIE instructions: %v", err)
	}
	x.initial = row.Regs
	if x.done {
		return row, nil
	}
	if err := x.run(f.Insns, t.addr+f.insnsOff, pc, false); err != nil {
		return nil, t.errf(f.Off, "FDE instructions: %v", err)
	}
	return row, nil
}

type exec struct {
	t       *Table
	cie     *CIE
	row     *Row
	initial [regs.Max]Rule
	stack   []savedState
	steps   int
	loc     uint64 // current location
	done    bool   // an advance went past pc
}

type savedState struct {
	cfa  Rule
	regs [regs.Max]Rule
	ra   bool
}

// run interprets instructions starting at location x.loc, stopping (and
// setting x.done) before the first advance past pc. insnsAddr is the
// address of insns[0], the base of pcrel DW_CFA_set_loc operands.
func (x *exec) run(insns []byte, insnsAddr, pc uint64, inCIE bool) error {
	t, c, row := x.t, x.cie, x.row
	r := reader{b: insns, order: t.arch.Order, ptr: c.AddrSize}
	advance := func(delta uint64) bool {
		hi, d := bits.Mul64(delta, c.CodeAlign)
		loc, carry := bits.Add64(x.loc, d, 0)
		if hi != 0 || carry != 0 || loc > pc {
			x.done = true
			return false
		}
		x.loc, row.Loc = loc, loc
		return true
	}
	set := func(reg uint64, rule Rule) {
		if reg < regs.Max {
			row.Regs[reg] = rule
		}
	}
	for r.off < len(r.b) {
		x.steps++
		if x.steps > maxInsns {
			return fmt.Errorf("more than %d instructions", maxInsns)
		}
		op, _ := r.u8()
		var err error
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			if !advance(uint64(op & 0x3f)) {
				return nil
			}
			continue
		case cfaOffset:
			var n uint64
			if n, err = r.uleb(); err != nil {
				return err
			}
			set(uint64(op&0x3f), Rule{Kind: RuleOffset, Offset: int64(n) * c.DataAlign})
			continue
		case cfaRestore:
			if inCIE {
				return fmt.Errorf("DW_CFA_restore in a CIE")
			}
			set(uint64(op&0x3f), x.initial[op&0x3f])
			continue
		}
		switch op {
		case cfaNop:
		case cfaSetLoc:
			var a uint64
			enc := c.FDEEnc
			if t.debug {
				enc = dwEHPEabsptr
			}
			if a, err = r.encoded(enc, insnsAddr, 0, nil); err != nil {
				return err
			}
			if a < x.loc {
				return fmt.Errorf("DW_CFA_set_loc goes backwards")
			}
			if a > pc {
				x.done = true
				return nil
			}
			x.loc, row.Loc = a, a
		case cfaAdvanceLoc1, cfaAdvanceLoc2, cfaAdvanceLoc4, cfaAdvLoc8:
			var d uint64
			switch op {
			case cfaAdvanceLoc1:
				var v byte
				v, err = r.u8()
				d = uint64(v)
			case cfaAdvanceLoc2:
				var v uint16
				v, err = r.u16()
				d = uint64(v)
			case cfaAdvanceLoc4:
				var v uint32
				v, err = r.u32()
				d = uint64(v)
			default:
				d, err = r.u64()
			}
			if err != nil {
				return err
			}
			if !advance(d) {
				return nil
			}
		case cfaOffsetExt, cfaOffsetExtSf, cfaValOffset, cfaValOffSf, cfaGNUNegOff:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			var off int64
			switch op {
			case cfaOffsetExt, cfaValOffset, cfaGNUNegOff:
				var n uint64
				n, err = r.uleb()
				off = int64(n) * c.DataAlign
				if op == cfaGNUNegOff {
					off = -off
				}
			default:
				var n int64
				n, err = r.sleb()
				off = n * c.DataAlign
			}
			if err != nil {
				return err
			}
			kind := RuleOffset
			if op == cfaValOffset || op == cfaValOffSf {
				kind = RuleValOffset
			}
			set(reg, Rule{Kind: kind, Offset: off})
		case cfaRestoreExt, cfaUndefined, cfaSameValue:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			switch op {
			case cfaRestoreExt:
				if inCIE {
					return fmt.Errorf("DW_CFA_restore_extended in a CIE")
				}
				if reg < regs.Max {
					set(reg, x.initial[reg])
				}
			case cfaUndefined:
				set(reg, Rule{Kind: RuleUndefined})
			default:
				set(reg, Rule{Kind: RuleSameValue})
			}
		case cfaRegister:
			reg, err1 := r.uleb()
			reg2, err2 := r.uleb()
			if err1 != nil || err2 != nil {
				return errTruncated
			}
			set(reg, Rule{Kind: RuleRegister, Reg: reg2})
		case cfaRemember:
			if len(x.stack) >= maxRememberDep {
				return fmt.Errorf("DW_CFA_remember_state nested deeper than %d", maxRememberDep)
			}
			x.stack = append(x.stack, savedState{row.CFA, row.Regs, row.RASigned})
		case cfaRestoreSt:
			if len(x.stack) == 0 {
				return fmt.Errorf("DW_CFA_restore_state without remember_state")
			}
			s := x.stack[len(x.stack)-1]
			x.stack = x.stack[:len(x.stack)-1]
			// The CFA is restored too (DWARF 5 §6.4.2.4), and GCC relies on it.
			row.CFA, row.Regs, row.RASigned = s.cfa, s.regs, s.ra
		case cfaDefCFA, cfaDefCFASf:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			var off int64
			if op == cfaDefCFA {
				var n uint64
				n, err = r.uleb()
				off = int64(n)
			} else {
				var n int64
				n, err = r.sleb()
				off = n * c.DataAlign
			}
			if err != nil {
				return err
			}
			row.CFA = Rule{Kind: RuleCFARegOffset, Reg: reg, Offset: off}
		case cfaDefCFAReg:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			// RISC-V's CIEs start with def_cfa_register alone: like libgcc,
			// take an unset CFA as reg+0 (DWARF 5 §6.4.2.2 assumes one).
			switch row.CFA.Kind {
			case RuleUnset:
				row.CFA = Rule{Kind: RuleCFARegOffset}
			case RuleCFARegOffset:
			default:
				return fmt.Errorf("DW_CFA_def_cfa_register without a register CFA")
			}
			row.CFA.Reg = reg
		case cfaDefCFAOff, cfaDefCFAOffSf:
			var off int64
			if op == cfaDefCFAOff {
				var n uint64
				n, err = r.uleb()
				off = int64(n)
			} else {
				var n int64
				n, err = r.sleb()
				off = n * c.DataAlign
			}
			if err != nil {
				return err
			}
			if row.CFA.Kind != RuleCFARegOffset {
				return fmt.Errorf("DW_CFA_def_cfa_offset without a register CFA")
			}
			row.CFA.Offset = off
		case cfaDefCFAExpr:
			b, err := x.block(&r)
			if err != nil {
				return err
			}
			row.CFA = Rule{Kind: RuleCFAExpression, Expr: b}
		case cfaExpression, cfaValExpr:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			b, err := x.block(&r)
			if err != nil {
				return err
			}
			kind := RuleExpression
			if op == cfaValExpr {
				kind = RuleValExpression
			}
			set(reg, Rule{Kind: kind, Expr: b})
		case cfaGNUArgsSize:
			if row.ArgsSize, err = r.uleb(); err != nil {
				return err
			}
		case cfaGNUWindow:
			if !t.arch.AArch64 {
				return fmt.Errorf("DW_CFA_GNU_window_save (SPARC) is not supported")
			}
			row.RASigned = !row.RASigned
		default:
			return fmt.Errorf("unknown DW_CFA opcode %#x", op)
		}
	}
	return nil
}

func (x *exec) block(r *reader) ([]byte, error) {
	n, err := r.uleb()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, errTruncated
	}
	return r.bytes(int(n))
}
