package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/unwound-dev/unwound/handler/unwind/regs"
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
	fail := func(off int, format string, args ...any) error {
		return fmt.Errorf("dwarf expr at %d: "+format, append([]any{off}, args...)...)
	}
	need := func(n int) bool { return len(stack) >= n }
	pop := func() uint64 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v
	}
	for steps := 0; r.off < len(r.b); steps++ {
		if steps >= maxExprSteps {
			return 0, fail(r.off, "more than %d steps", maxExprSteps)
		}
		if len(stack) > maxExprStack {
			return 0, fail(r.off, "stack deeper than %d", maxExprStack)
		}
		at := r.off
		op, _ := r.u8()
		var err error
		var v uint64
		switch {
		case op >= opLit0 && op <= opLit31:
			stack = append(stack, uint64(op-opLit0))
			continue
		case op >= opBreg0 && op <= opBreg31 || op == opBregx:
			reg := uint64(op - opBreg0)
			if op == opBregx {
				if reg, err = r.uleb(); err != nil {
					return 0, fail(at, "truncated")
				}
			}
			off, err := r.sleb()
			if err != nil {
				return 0, fail(at, "truncated")
			}
			var rv uint64
			ok := false
			if ctx.Regs != nil && reg < regs.Max {
				rv, ok = ctx.Regs.Get(int(reg))
			}
			if !ok {
				return 0, fail(at, "register %d unknown (%w)", reg, ErrRegUnknown)
			}
			stack = append(stack, (rv+uint64(off))&mask)
			continue
		case op >= opReg0 && op <= opReg31 || op == opRegx:
			return 0, fail(at, "DW_OP_reg names a location: %w", ErrExprUnsupported)
		}
		switch op {
		case opAddr:
			v, err = r.addr()
			stack = append(stack, v)
		case opConst1u, opConst1s:
			var b byte
			b, err = r.u8()
			v = uint64(b)
			if op == opConst1s {
				v = uint64(int64(int8(b)))
			}
			stack = append(stack, v&mask)
		case opConst2u, opConst2s:
			var h uint16
			h, err = r.u16()
			v = uint64(h)
			if op == opConst2s {
				v = uint64(int64(int16(h)))
			}
			stack = append(stack, v&mask)
		case opConst4u, opConst4s:
			var w uint32
			w, err = r.u32()
			v = uint64(w)
			if op == opConst4s {
				v = uint64(int64(int32(w)))
			}
			stack = append(stack, v&mask)
		case opConst8u, opConst8s:
			v, err = r.u64()
			stack = append(stack, v&mask)
		case opConstu:
			v, err = r.uleb()
			stack = append(stack, v&mask)
		case opConsts:
			var s int64
			s, err = r.sleb()
			stack = append(stack, uint64(s)&mask)
		case opDup:
			if !need(1) {
				return 0, fail(at, "stack underflow")
			}
			stack = append(stack, stack[len(stack)-1])
		case opDrop:
			if !need(1) {
				return 0, fail(at, "stack underflow")
			}
			pop()
		case opOver:
			if !need(2) {
				return 0, fail(at, "stack underflow")
			}
			stack = append(stack, stack[len(stack)-2])
		case opPick:
			var i byte
			if i, err = r.u8(); err != nil {
				break
			}
			if !need(int(i) + 1) {
				return 0, fail(at, "DW_OP_pick %d past the stack", i)
			}
			stack = append(stack, stack[len(stack)-1-int(i)])
		case opSwap:
			if !need(2) {
				return 0, fail(at, "stack underflow")
			}
			n := len(stack)
			stack[n-1], stack[n-2] = stack[n-2], stack[n-1]
		case opRot:
			if !need(3) {
				return 0, fail(at, "stack underflow")
			}
			n := len(stack)
			stack[n-1], stack[n-2], stack[n-3] = stack[n-2], stack[n-3], stack[n-1]
		case opDeref, opDerefSize:
			size := ps
			if op == opDerefSize {
				var b byte
				if b, err = r.u8(); err != nil {
					break
				}
				size = int(b)
				if size < 1 || size > ps {
					return 0, fail(at, "DW_OP_deref_size %d", size)
				}
			}
			if !need(1) {
				return 0, fail(at, "stack underflow")
			}
			addr := pop()
			if ctx.Mem == nil {
				return 0, fail(at, "no memory to dereference %#x", addr)
			}
			var buf [8]byte
			if _, err := ctx.Mem.ReadAt(buf[:size], int64(addr)); err != nil {
				return 0, fail(at, "reading %#x: %v", addr, err)
			}
			var tmp [8]byte
			if ctx.Order == binary.BigEndian {
				copy(tmp[8-size:], buf[:size])
				v = binary.BigEndian.Uint64(tmp[:])
			} else {
				copy(tmp[:], buf[:size])
				v = binary.LittleEndian.Uint64(tmp[:])
			}
			stack = append(stack, v)
		case opAbs, opNeg, opNot:
			if !need(1) {
				return 0, fail(at, "stack underflow")
			}
			a := stack[len(stack)-1]
			switch op {
			case opAbs:
				if signed(a, ps) < 0 {
					a = -a
				}
			case opNeg:
				a = -a
			default:
				a = ^a
			}
			stack[len(stack)-1] = a & mask
		case opPlusUconst:
			if v, err = r.uleb(); err != nil {
				break
			}
			if !need(1) {
				return 0, fail(at, "stack underflow")
			}
			stack[len(stack)-1] = (stack[len(stack)-1] + v) & mask
		case opAnd, opDiv, opMinus, opMod, opMul, opOr, opPlus, opShl, opShr, opShra, opXor,
			opEq, opGe, opGt, opLe, opLt, opNe:
			if !need(2) {
				return 0, fail(at, "stack underflow")
			}
			b := pop()
			a := pop()
			sa, sb := signed(a, ps), signed(b, ps)
			switch op {
			case opAnd:
				v = a & b
			case opOr:
				v = a | b
			case opXor:
				v = a ^ b
			case opPlus:
				v = a + b
			case opMinus:
				v = a - b
			case opMul:
				v = a * b
			case opDiv:
				if sb == 0 {
					return 0, fail(at, "division by zero")
				}
				if sb == -1 {
					v = uint64(-sa)
				} else {
					v = uint64(sa / sb)
				}
			case opMod:
				if b == 0 {
					return 0, fail(at, "modulo by zero")
				}
				v = a % b
			case opShl:
				if b >= 64 {
					v = 0
				} else {
					v = a << b
				}
			case opShr:
				if b >= 64 {
					v = 0
				} else {
					v = (a & mask) >> b
				}
			case opShra:
				if b >= 64 {
					b = 63
				}
				v = uint64(sa >> b)
			case opEq:
				v = b2u(sa == sb)
			case opGe:
				v = b2u(sa >= sb)
			case opGt:
				v = b2u(sa > sb)
			case opLe:
				v = b2u(sa <= sb)
			case opLt:
				v = b2u(sa < sb)
			case opNe:
				v = b2u(sa != sb)
			}
			stack = append(stack, v&mask)
		case opSkip, opBra:
			var h uint16
			if h, err = r.u16(); err != nil {
				break
			}
			take := true
			if op == opBra {
				if !need(1) {
					return 0, fail(at, "stack underflow")
				}
				take = pop() != 0
			}
			if take {
				to := r.off + int(int16(h))
				if to < 0 || to > len(r.b) {
					return 0, fail(at, "branch to %d outside the expression", to)
				}
				r.off = to
			}
		case opNop:
		case opStackValue:
			// Marks the top as a value (for val_expression contexts): the
			// result is the top either way.
			if !need(1) {
				return 0, fail(at, "stack underflow")
			}
			return stack[len(stack)-1], nil
		case opXderef:
			return 0, fail(at, "DW_OP_xderef: %w", ErrExprUnsupported)
		default:
			return 0, fail(at, "operator %#x: %w", op, ErrExprUnsupported)
		}
		if err != nil {
			return 0, fail(at, "truncated operand")
		}
	}
	if len(stack) == 0 {
		return 0, errors.New("dwarf expr: empty stack at the end")
	}
	return stack[len(stack)-1], nil
}

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
