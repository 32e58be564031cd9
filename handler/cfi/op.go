package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/unwound-dev/unwound/handler/regs"
)

// Limits on expressions: the ones compilers emit have a handful of ops.
const (
	maxExprSteps = 10000
	maxExprStack = 64
)

// EvalContext is what an expression may read.
type EvalContext struct {
	Regs    *regs.Set
	Mem     io.ReaderAt
	PtrSize int
	Order   binary.ByteOrder
	Initial []uint64 // pushed before evaluation (the CFA for register rules)
}

// ErrExprUnsupported is an operator that needs debug information or a
// location description, which CFI expressions cannot use.
var ErrExprUnsupported = errors.New("unsupported DWARF operator")

// ErrRegUnknown: an expression reads a register the unwinder does not
// have, e.g. RISC-V's vlenb (DWARF 7202, RVV code's frames), or one the
// previous step could not recover. The frame fails; other strategies may
// still recover it.
var ErrRegUnknown = errors.New("the unwinder has no value for it")

// DWARF 5 §2.5 / §7.7.1 operator codes.
const (
	opAddr       = 0x03
	opDeref      = 0x06
	opConst1u    = 0x08
	opConst1s    = 0x09
	opConst2u    = 0x0a
	opConst2s    = 0x0b
	opConst4u    = 0x0c
	opConst4s    = 0x0d
	opConst8u    = 0x0e
	opConst8s    = 0x0f
	opConstu     = 0x10
	opConsts     = 0x11
	opDup        = 0x12
	opDrop       = 0x13
	opOver       = 0x14
	opPick       = 0x15
	opSwap       = 0x16
	opRot        = 0x17
	opXderef     = 0x18
	opAbs        = 0x19
	opAnd        = 0x1a
	opDiv        = 0x1b
	opMinus      = 0x1c
	opMod        = 0x1d
	opMul        = 0x1e
	opNeg        = 0x1f
	opNot        = 0x20
	opOr         = 0x21
	opPlus       = 0x22
	opPlusUconst = 0x23
	opShl        = 0x24
	opShr        = 0x25
	opShra       = 0x26
	opXor        = 0x27
	opBra        = 0x28
	opEq         = 0x29
	opGe         = 0x2a
	opGt         = 0x2b
	opLe         = 0x2c
	opLt         = 0x2d
	opNe         = 0x2e
	opSkip       = 0x2f
	opLit0       = 0x30
	opLit31      = 0x4f
	opReg0       = 0x50
	opReg31      = 0x6f
	opBreg0      = 0x70
	opBreg31     = 0x8f
	opRegx       = 0x90
	opBregx      = 0x92
	opDerefSize  = 0x94
	opNop        = 0x96
	opStackValue = 0x9f
)

// opAction is what an operator does once its operands are read.
type opAction uint8

const (
	actUnsupported opAction = iota // needs debug information, or unknown
	actPush                        // push the operand
	actPushReg                     // push register arg0 plus arg1
	actLocation                    // DW_OP_reg*: a location, refused
	actPick                        // push the stack entry arg0 below the top
	actDrop                        // pop
	actRoll                        // move the top arg0 entries down: swap, rot
	actDeref                       // replace the address on top by what it points at
	actArith                       // top = fn(top, pop or arg0)
	actBranch                      // skip arg0 bytes (if the popped top is not 0)
	actNop                         // nothing
	actValue                       // stop: the top is the value
	actXderef                      // DW_OP_xderef: refused with its own message
)

// opSpec is one DWARF operator: its operands, how many stack entries it
// needs (checked after its operands are read: an operator with a bad
// operand reports that, whatever the stack), and its action.
type opSpec struct {
	args [2]operand
	act  opAction
	pops uint8
	imm  uint8 // the implicit operand of DW_OP_dup and friends
	fn   func(a, b uint64, ps int) (uint64, error)
}

// opTable holds the operators below DW_OP_lit0 and from DW_OP_regx on;
// opFor adds the literal, register and base-register ranges.
var opTable = [0xa0]opSpec{
	opAddr:       {args: [2]operand{fAddr}, act: actPush},
	opDeref:      {act: actDeref},
	opConst1u:    {args: [2]operand{fU1}, act: actPush},
	opConst1s:    {args: [2]operand{fS1}, act: actPush},
	opConst2u:    {args: [2]operand{fU2}, act: actPush},
	opConst2s:    {args: [2]operand{fS2}, act: actPush},
	opConst4u:    {args: [2]operand{fU4}, act: actPush},
	opConst4s:    {args: [2]operand{fS4}, act: actPush},
	opConst8u:    {args: [2]operand{fU8}, act: actPush},
	opConst8s:    {args: [2]operand{fS8}, act: actPush},
	opConstu:     {args: [2]operand{fULEB}, act: actPush},
	opConsts:     {args: [2]operand{fSLEB}, act: actPush},
	opDup:        {args: [2]operand{fImplicit}, act: actPick, pops: 1, imm: 0},
	opDrop:       {act: actDrop, pops: 1},
	opOver:       {args: [2]operand{fImplicit}, act: actPick, pops: 2, imm: 1},
	opPick:       {args: [2]operand{fU1}, act: actPick},
	opSwap:       {args: [2]operand{fImplicit}, act: actRoll, pops: 2, imm: 2},
	opRot:        {args: [2]operand{fImplicit}, act: actRoll, pops: 3, imm: 3},
	opXderef:     {act: actXderef},
	opAbs:        {act: actArith, pops: 1, fn: arAbs},
	opAnd:        {act: actArith, pops: 2, fn: arAnd},
	opDiv:        {act: actArith, pops: 2, fn: arDiv},
	opMinus:      {act: actArith, pops: 2, fn: arMinus},
	opMod:        {act: actArith, pops: 2, fn: arMod},
	opMul:        {act: actArith, pops: 2, fn: arMul},
	opNeg:        {act: actArith, pops: 1, fn: arNeg},
	opNot:        {act: actArith, pops: 1, fn: arNot},
	opOr:         {act: actArith, pops: 2, fn: arOr},
	opPlus:       {act: actArith, pops: 2, fn: arPlus},
	opPlusUconst: {args: [2]operand{fULEB}, act: actArith, pops: 1, fn: arPlus},
	opShl:        {act: actArith, pops: 2, fn: arShl},
	opShr:        {act: actArith, pops: 2, fn: arShr},
	opShra:       {act: actArith, pops: 2, fn: arShra},
	opXor:        {act: actArith, pops: 2, fn: arXor},
	opBra:        {args: [2]operand{fS2}, act: actBranch, pops: 1},
	opEq:         {act: actArith, pops: 2, fn: arEq},
	opGe:         {act: actArith, pops: 2, fn: arGe},
	opGt:         {act: actArith, pops: 2, fn: arGt},
	opLe:         {act: actArith, pops: 2, fn: arLe},
	opLt:         {act: actArith, pops: 2, fn: arLt},
	opNe:         {act: actArith, pops: 2, fn: arNe},
	opSkip:       {args: [2]operand{fS2}, act: actBranch},
	opRegx:       {act: actLocation},
	opBregx:      {args: [2]operand{fULEB, fSLEB}, act: actPushReg},
	opDerefSize:  {args: [2]operand{fU1}, act: actDeref},
	opNop:        {act: actNop},
	opStackValue: {act: actValue, pops: 1},
}

// The operators that carry their operand in the opcode.
var (
	opLitSpec  = opSpec{args: [2]operand{fImplicit}, act: actPush}
	opRegSpec  = opSpec{act: actLocation}
	opBregSpec = opSpec{args: [2]operand{fImplicit, fSLEB}, act: actPushReg}
)

// opFor returns op's spec and the value of its implicit operand.
func opFor(op byte) (*opSpec, uint64) {
	switch {
	case op >= opLit0 && op <= opLit31:
		return &opLitSpec, uint64(op - opLit0)
	case op >= opReg0 && op <= opReg31:
		return &opRegSpec, 0
	case op >= opBreg0 && op <= opBreg31:
		return &opBregSpec, uint64(op - opBreg0)
	case int(op) < len(opTable):
		s := &opTable[op]
		return s, uint64(s.imm)
	}
	return &opTable[0], 0
}

// exprErr is called on error paths only: not inlined (see Table.errf).
//
//go:noinline
func exprErr(at int, format string, args ...any) error {
	return fmt.Errorf("dwarf expr at %d: "+format, append([]any{at}, args...)...)
}

// Eval runs a DWARF expression and returns the value on top of the stack.
// Register operators (DW_OP_reg*) name a location, not a value, and are
// refused; so are operators that need debug information.
func Eval(expr []byte, ctx *EvalContext) (uint64, error) {
	ps := ctx.PtrSize
	if ps != 4 && ps != 8 {
		return 0, fmt.Errorf("dwarf expr: pointer size %d", ps)
	}
	mask := ^uint64(0)
	if ps == 4 {
		mask = 0xffffffff
	}
	stack := make([]uint64, 0, 16)
	stack = append(stack, ctx.Initial...)
	r := reader{b: expr, order: ctx.Order, ptr: ps}
	for steps := 0; r.off < len(r.b); steps++ {
		if steps >= maxExprSteps || len(stack) > maxExprStack {
			return 0, limitErr(r.off, steps)
		}
		at := r.off
		op := r.b[r.off]
		r.off++
		s, low := opFor(op)
		// Most operators have no operand or one: decode those without
		// operands' loop (a measurable share of Eval's time).
		args := [2]uint64{low}
		var err error
		switch {
		case !decodes(&s.args):
		case s.args[1] == fNone:
			args[0], err = r.operand(s.args[0])
		case s.args[0] == fImplicit:
			args[1], err = r.operand(s.args[1])
		default:
			_, err = r.operands(&s.args, &args)
		}
		if err != nil {
			if s.act == actPushReg {
				return 0, exprErr(at, "truncated")
			}
			return 0, exprErr(at, "truncated operand")
		}
		if len(stack) < int(s.pops) {
			return 0, exprErr(at, "stack underflow")
		}
		n := len(stack)
		switch s.act {
		case actPush:
			stack = append(stack, args[0]&mask)
		case actPushReg:
			v, ok := ctx.reg(args[0])
			if !ok {
				return 0, exprErr(at, "register %d unknown (%w)", args[0], ErrRegUnknown)
			}
			stack = append(stack, (v+args[1])&mask)
		case actPick:
			if uint64(n) <= args[0] {
				return 0, exprErr(at, "DW_OP_pick %d past the stack", args[0])
			}
			stack = append(stack, stack[n-1-int(args[0])])
		case actDrop:
			stack = stack[:n-1]
		case actRoll:
			k := int(args[0])
			top := stack[n-1]
			copy(stack[n-k+1:], stack[n-k:n-1])
			stack[n-k] = top
		case actDeref:
			v, err := deref(&r, ctx, op, args[0], stack)
			if err != nil {
				return 0, exprErr(at, "%s", err.Error())
			}
			stack[n-1] = v
		case actArith:
			b := args[0]
			if s.pops == 2 {
				b = stack[n-1]
				stack = stack[:n-1]
			}
			v, err := s.fn(stack[len(stack)-1], b, ps)
			if err != nil {
				return 0, exprErr(at, "%s", err.Error())
			}
			stack[len(stack)-1] = v & mask
		case actBranch: // DW_OP_skip, or DW_OP_bra when the popped top is not 0
			if s.pops == 0 || stack[n-1] != 0 {
				to := r.off + int(int64(args[0]))
				if to < 0 || to > len(r.b) {
					return 0, exprErr(at, "branch to %d outside the expression", to)
				}
				r.off = to
			}
			stack = stack[:n-int(s.pops)]
		case actNop:
		case actValue:
			// Marks the top as a value (for val_expression contexts): the
			// result is the top either way.
			return stack[n-1], nil
		default:
			return 0, unsupported(at, op, s.act)
		}
	}
	if len(stack) == 0 {
		return 0, errors.New("dwarf expr: empty stack at the end")
	}
	return stack[len(stack)-1], nil
}

// reg is register n's value, if the unwinder has it.
func (ctx *EvalContext) reg(n uint64) (uint64, bool) {
	if ctx.Regs == nil || n >= regs.Max {
		return 0, false
	}
	return ctx.Regs.Get(int(n))
}

// limitErr is the error for an expression past a limit.
func limitErr(at, steps int) error {
	if steps >= maxExprSteps {
		return exprErr(at, "more than %d steps", maxExprSteps)
	}
	return exprErr(at, "stack deeper than %d", maxExprStack)
}

// unsupported is the error for an operator CFI cannot use.
func unsupported(at int, op byte, act opAction) error {
	switch act {
	case actLocation:
		return exprErr(at, "DW_OP_reg names a location: %w", ErrExprUnsupported)
	case actXderef:
		return exprErr(at, "DW_OP_xderef: %w", ErrExprUnsupported)
	}
	return exprErr(at, "operator %#x: %w", op, ErrExprUnsupported)
}

// deref reads what the address on top of the stack points at: a pointer
// for DW_OP_deref, size bytes for DW_OP_deref_size. The size is checked
// before the stack, as it always was.
func deref(r *reader, ctx *EvalContext, op byte, size uint64, stack []uint64) (uint64, error) {
	if op == opDeref {
		size = uint64(r.ptr)
	} else if size < 1 || size > uint64(r.ptr) {
		return 0, fmt.Errorf("DW_OP_deref_size %d", size)
	}
	if len(stack) == 0 {
		return 0, errUnderflow
	}
	addr := stack[len(stack)-1]
	if ctx.Mem == nil {
		return 0, fmt.Errorf("no memory to dereference %#x", addr)
	}
	var buf [8]byte
	if _, err := ctx.Mem.ReadAt(buf[:size], int64(addr)); err != nil {
		return 0, fmt.Errorf("reading %#x: %v", addr, err)
	}
	var tmp [8]byte
	if ctx.Order == binary.BigEndian {
		copy(tmp[8-size:], buf[:size])
		return binary.BigEndian.Uint64(tmp[:]), nil
	}
	copy(tmp[:], buf[:size])
	return binary.LittleEndian.Uint64(tmp[:]), nil
}

var (
	errUnderflow = errors.New("stack underflow")
	errDivZero   = errors.New("division by zero")
	errModZero   = errors.New("modulo by zero")
)

// The arithmetic and comparison operators: a is the entry below the top
// (or the only one), b the top (or the operand). The caller masks the
// result to the pointer size.

func arAbs(a, _ uint64, ps int) (uint64, error) {
	if signed(a, ps) < 0 {
		a = -a
	}
	return a, nil
}

func arNeg(a, _ uint64, _ int) (uint64, error) { return -a, nil }
func arNot(a, _ uint64, _ int) (uint64, error) { return ^a, nil }
func arAnd(a, b uint64, _ int) (uint64, error) { return a & b, nil }
func arOr(a, b uint64, _ int) (uint64, error)  { return a | b, nil }
func arXor(a, b uint64, _ int) (uint64, error) { return a ^ b, nil }
func arPlus(a, b uint64, _ int) (uint64, error) {
	return a + b, nil
}
func arMinus(a, b uint64, _ int) (uint64, error) { return a - b, nil }
func arMul(a, b uint64, _ int) (uint64, error)   { return a * b, nil }

func arDiv(a, b uint64, ps int) (uint64, error) {
	sa, sb := signed(a, ps), signed(b, ps)
	switch sb {
	case 0:
		return 0, errDivZero
	case -1:
		return uint64(-sa), nil
	}
	return uint64(sa / sb), nil
}

func arMod(a, b uint64, _ int) (uint64, error) {
	if b == 0 {
		return 0, errModZero
	}
	return a % b, nil
}

func arShl(a, b uint64, _ int) (uint64, error) {
	if b >= 64 {
		return 0, nil
	}
	return a << b, nil
}

func arShr(a, b uint64, ps int) (uint64, error) {
	if b >= 64 {
		return 0, nil
	}
	if ps == 4 {
		a &= 0xffffffff
	}
	return a >> b, nil
}

func arShra(a, b uint64, ps int) (uint64, error) {
	if b >= 64 {
		b = 63
	}
	return uint64(signed(a, ps) >> b), nil
}

func arEq(a, b uint64, ps int) (uint64, error) { return b2u(signed(a, ps) == signed(b, ps)), nil }
func arGe(a, b uint64, ps int) (uint64, error) { return b2u(signed(a, ps) >= signed(b, ps)), nil }
func arGt(a, b uint64, ps int) (uint64, error) { return b2u(signed(a, ps) > signed(b, ps)), nil }
func arLe(a, b uint64, ps int) (uint64, error) { return b2u(signed(a, ps) <= signed(b, ps)), nil }
func arLt(a, b uint64, ps int) (uint64, error) { return b2u(signed(a, ps) < signed(b, ps)), nil }
func arNe(a, b uint64, ps int) (uint64, error) { return b2u(signed(a, ps) != signed(b, ps)), nil }

func signed(v uint64, ps int) int64 {
	if ps == 4 {
		return int64(int32(uint32(v)))
	}
	return int64(v)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
