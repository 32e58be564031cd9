package cfi

import (
	"fmt"
	"math/bits"

	"github.com/unwound-dev/unwound/handler/regs"
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

	// What the run in progress works on.
	r         reader
	pc        uint64
	insnsAddr uint64 // address of r.b[0]: the base of pcrel DW_CFA_set_loc
	inCIE     bool
}

type savedState struct {
	cfa  Rule
	regs [regs.Max]Rule
	ra   bool
}

// cfaAction is what an instruction does once its operands are read.
type cfaAction uint8

const (
	doUnknown      cfaAction = iota // not an opcode we know
	doNop                           // DW_CFA_nop
	doSetLoc                        // DW_CFA_set_loc: operand in the CIE's encoding
	doAdvance                       // advance the location by arg0 code units
	doRule                          // register arg0 gets a rule of kind rule
	doRestore                       // register arg0 gets its rule after the CIE
	doRemember                      // DW_CFA_remember_state
	doRestoreState                  // DW_CFA_restore_state
	doDefCFA                        // CFA = register arg0 + offset arg1
	doCFAReg                        // CFA register = arg0
	doCFAOff                        // CFA offset = arg0
	doCFAExpr                       // CFA = expression
	doArgsSize                      // DW_CFA_GNU_args_size
	doNegateRA                      // AArch64 negate_ra_state
)

// Flags on how an offset operand is scaled.
const (
	cfaScaled  = 1 << iota // times the CIE's data alignment
	cfaNegated             // negated (DW_CFA_GNU_negative_offset_extended)
)

// cfaSpec is one DW_CFA instruction: its operands, its action, the rule
// kind it sets and how its offset is scaled.
type cfaSpec struct {
	args  [2]operand
	act   cfaAction
	rule  RuleKind
	flags uint8
	name  string // for the errors that name the instruction
}

// cfaTable holds the instructions with a whole opcode byte; cfaFor adds
// the three whose operand is in the opcode's low six bits.
var cfaTable = [0x30]cfaSpec{
	cfaNop:         {act: doNop},
	cfaSetLoc:      {act: doSetLoc},
	cfaAdvanceLoc1: {args: [2]operand{fU1}, act: doAdvance},
	cfaAdvanceLoc2: {args: [2]operand{fU2}, act: doAdvance},
	cfaAdvanceLoc4: {args: [2]operand{fU4}, act: doAdvance},
	cfaOffsetExt:   {args: [2]operand{fULEB, fULEB}, act: doRule, rule: RuleOffset, flags: cfaScaled},
	cfaRestoreExt:  {args: [2]operand{fULEB}, act: doRestore, name: "DW_CFA_restore_extended"},
	cfaUndefined:   {args: [2]operand{fULEB}, act: doRule, rule: RuleUndefined},
	cfaSameValue:   {args: [2]operand{fULEB}, act: doRule, rule: RuleSameValue},
	cfaRegister:    {args: [2]operand{fULEB, fULEB}, act: doRule, rule: RuleRegister},
	cfaRemember:    {act: doRemember},
	cfaRestoreSt:   {act: doRestoreState},
	cfaDefCFA:      {args: [2]operand{fULEB, fULEB}, act: doDefCFA},
	cfaDefCFAReg:   {args: [2]operand{fULEB}, act: doCFAReg},
	cfaDefCFAOff:   {args: [2]operand{fULEB}, act: doCFAOff},
	cfaDefCFAExpr:  {args: [2]operand{fBlock}, act: doCFAExpr},
	cfaExpression:  {args: [2]operand{fULEB, fBlock}, act: doRule, rule: RuleExpression},
	cfaOffsetExtSf: {args: [2]operand{fULEB, fSLEB}, act: doRule, rule: RuleOffset, flags: cfaScaled},
	cfaDefCFASf:    {args: [2]operand{fULEB, fSLEB}, act: doDefCFA, flags: cfaScaled},
	cfaDefCFAOffSf: {args: [2]operand{fSLEB}, act: doCFAOff, flags: cfaScaled},
	cfaValOffset:   {args: [2]operand{fULEB, fULEB}, act: doRule, rule: RuleValOffset, flags: cfaScaled},
	cfaValOffSf:    {args: [2]operand{fULEB, fSLEB}, act: doRule, rule: RuleValOffset, flags: cfaScaled},
	cfaValExpr:     {args: [2]operand{fULEB, fBlock}, act: doRule, rule: RuleValExpression},
	cfaAdvLoc8:     {args: [2]operand{fU8}, act: doAdvance},
	cfaGNUWindow:   {act: doNegateRA},
	cfaGNUArgsSize: {args: [2]operand{fULEB}, act: doArgsSize},
	cfaGNUNegOff:   {args: [2]operand{fULEB, fULEB}, act: doRule, rule: RuleOffset, flags: cfaScaled | cfaNegated},
}

// The instructions with an operand in the opcode, by its top two bits.
var cfaCompact = [4]cfaSpec{
	1: {args: [2]operand{fImplicit}, act: doAdvance},                                         // DW_CFA_advance_loc
	2: {args: [2]operand{fImplicit, fULEB}, act: doRule, rule: RuleOffset, flags: cfaScaled}, // DW_CFA_offset
	3: {args: [2]operand{fImplicit}, act: doRestore, name: "DW_CFA_restore"},                 // DW_CFA_restore
}

// cfaFor returns op's spec and the value of its implicit operand.
func cfaFor(op byte) (*cfaSpec, uint64) {
	if op >= 0x40 {
		return &cfaCompact[op>>6], uint64(op & 0x3f)
	}
	if int(op) < len(cfaTable) {
		return &cfaTable[op], 0
	}
	return &cfaNoSpec, 0
}

var cfaNoSpec cfaSpec // doUnknown

// run interprets instructions starting at location x.loc, stopping (and
// setting x.done) before the first advance past pc. insnsAddr is the
// address of insns[0], the base of pcrel DW_CFA_set_loc operands.
func (x *exec) run(insns []byte, insnsAddr, pc uint64, inCIE bool) error {
	x.r = reader{b: insns, order: x.t.arch.Order, ptr: x.cie.AddrSize}
	x.pc, x.insnsAddr, x.inCIE = pc, insnsAddr, inCIE
	r := &x.r
	for r.off < len(r.b) {
		x.steps++
		if x.steps > maxInsns {
			return fmt.Errorf("more than %d instructions", maxInsns)
		}
		op := r.b[r.off]
		r.off++
		s, low := cfaFor(op)
		args := [2]uint64{low}
		var blk []byte
		if decodes(&s.args) {
			var err error
			if blk, err = r.operands(&s.args, &args); err != nil {
				return err
			}
		}
		if err := x.apply(s, op, &args, blk); err != nil || x.done {
			return err
		}
	}
	return nil
}

// apply performs one instruction, and sets x.done when an advance goes
// past the pc.
func (x *exec) apply(s *cfaSpec, op byte, args *[2]uint64, blk []byte) error {
	row, reg := x.row, args[0]
	switch s.act {
	case doNop:
	case doSetLoc:
		enc := x.cie.FDEEnc
		if x.t.debug {
			enc = dwEHPEabsptr
		}
		a, err := x.r.encoded(enc, x.insnsAddr, 0, nil)
		if err != nil {
			return err
		}
		if a < x.loc {
			return fmt.Errorf("DW_CFA_set_loc goes backwards")
		}
		if a > x.pc {
			x.done = true
			return nil
		}
		x.loc, row.Loc = a, a
	case doAdvance:
		hi, d := bits.Mul64(args[0], x.cie.CodeAlign)
		loc, carry := bits.Add64(x.loc, d, 0)
		if hi != 0 || carry != 0 || loc > x.pc {
			x.done = true
			return nil
		}
		x.loc, row.Loc = loc, loc
	case doRule:
		rule := Rule{Kind: s.rule}
		switch s.rule {
		case RuleOffset, RuleValOffset:
			rule.Offset = x.offset(s, args[1])
		case RuleRegister:
			rule.Reg = args[1]
		case RuleExpression, RuleValExpression:
			rule.Expr = blk
		}
		x.set(reg, rule)
	case doRestore:
		if x.inCIE {
			return fmt.Errorf("%s in a CIE", s.name)
		}
		if reg < regs.Max {
			x.set(reg, x.initial[reg])
		}
	case doRemember:
		if len(x.stack) >= maxRememberDep {
			return fmt.Errorf("DW_CFA_remember_state nested deeper than %d", maxRememberDep)
		}
		x.stack = append(x.stack, savedState{row.CFA, row.Regs, row.RASigned})
	case doRestoreState:
		if len(x.stack) == 0 {
			return fmt.Errorf("DW_CFA_restore_state without remember_state")
		}
		s := x.stack[len(x.stack)-1]
		x.stack = x.stack[:len(x.stack)-1]
		// The CFA is restored too (DWARF 5 §6.4.2.4), and GCC relies on it.
		row.CFA, row.Regs, row.RASigned = s.cfa, s.regs, s.ra
	case doDefCFA:
		row.CFA = Rule{Kind: RuleCFARegOffset, Reg: reg, Offset: x.offset(s, args[1])}
	case doCFAReg:
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
	case doCFAOff:
		if row.CFA.Kind != RuleCFARegOffset {
			return fmt.Errorf("DW_CFA_def_cfa_offset without a register CFA")
		}
		row.CFA.Offset = x.offset(s, args[0])
	case doCFAExpr:
		row.CFA = Rule{Kind: RuleCFAExpression, Expr: blk}
	case doArgsSize:
		row.ArgsSize = args[0]
	case doNegateRA:
		if !x.t.arch.AArch64 {
			return fmt.Errorf("DW_CFA_GNU_window_save (SPARC) is not supported")
		}
		row.RASigned = !row.RASigned
	default:
		return fmt.Errorf("unknown DW_CFA opcode %#x", op)
	}
	return nil
}

// offset is an offset operand v as instruction s scales it.
func (x *exec) offset(s *cfaSpec, v uint64) int64 {
	off := int64(v)
	if s.flags&cfaScaled != 0 {
		off *= x.cie.DataAlign
	}
	if s.flags&cfaNegated != 0 {
		off = -off
	}
	return off
}

func (x *exec) set(reg uint64, rule Rule) {
	if reg < regs.Max {
		x.row.Regs[reg] = rule
	}
}
