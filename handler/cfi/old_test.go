package cfi

// Temporary: the interpreters before the tables, for the differential test.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/unwound-dev/unwound/handler/regs"
	"math/bits"
	"reflect"
	"testing"
)

var _ = binary.LittleEndian

type oldReader struct {
	b     []byte
	off   int
	order binary.ByteOrder
	ptr   int
}

func (r *oldReader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, errOldTruncated
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b, nil
}

func (r *oldReader) u8() (byte, error) {
	b, err := r.bytes(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *oldReader) u16() (uint16, error) {
	b, err := r.bytes(2)
	if err != nil {
		return 0, err
	}
	return r.order.Uint16(b), nil
}

func (r *oldReader) u32() (uint32, error) {
	b, err := r.bytes(4)
	if err != nil {
		return 0, err
	}
	return r.order.Uint32(b), nil
}

func (r *oldReader) u64() (uint64, error) {
	b, err := r.bytes(8)
	if err != nil {
		return 0, err
	}
	return r.order.Uint64(b), nil
}

func (r *oldReader) addr() (uint64, error) {
	if r.ptr == 4 {
		v, err := r.u32()
		return uint64(v), err
	}
	return r.u64()
}

func (r *oldReader) uleb() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *oldReader) sleb() (int64, error) {
	var v int64
	var shift uint
	for {
		c, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
	}
}

func (r *oldReader) cstring() (string, error) {
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s, nil
		}
	}
	return "", errOldTruncated
}

// encoded reads a pointer in encoding enc. secAddr is the address of
// r.b[0] (for pcrel), dataBase the base of datarel (the .eh_frame_hdr
// start for its table). The indirect bit is refused: resolving it needs the
// process's memory, and no unwind table we read uses it for locations.
func (r *oldReader) encoded(enc byte, secAddr, dataBase uint64, _ any) (uint64, error) {
	if enc == dwEHPEomit {
		return 0, nil
	}
	if enc&dwEHPEindirect != 0 {
		return 0, fmt.Errorf("indirect pointer encoding %#x", enc)
	}
	fieldAddr := secAddr + uint64(r.off)
	if enc&0x70 == dwEHPEaligned {
		a := r.ptr
		if pad := (a - r.off%a) % a; pad > 0 {
			if _, err := r.bytes(pad); err != nil {
				return 0, err
			}
		}
	}
	var v uint64
	var err error
	switch enc & 0x0f {
	case dwEHPEabsptr:
		v, err = r.addr()
	case dwEHPEuleb128:
		v, err = r.uleb()
	case dwEHPEudata2:
		var x uint16
		x, err = r.u16()
		v = uint64(x)
	case dwEHPEudata4:
		var x uint32
		x, err = r.u32()
		v = uint64(x)
	case dwEHPEudata8, dwEHPEsdata8:
		v, err = r.u64()
	case dwEHPEsleb128:
		var x int64
		x, err = r.sleb()
		v = uint64(x)
	case dwEHPEsdata2:
		var x uint16
		x, err = r.u16()
		v = uint64(int64(int16(x)))
	case dwEHPEsdata4:
		var x uint32
		x, err = r.u32()
		v = uint64(int64(int32(x)))
	default:
		return 0, fmt.Errorf("pointer encoding %#x", enc)
	}
	if err != nil {
		return 0, err
	}
	switch enc & 0x70 {
	case 0, dwEHPEaligned:
	case dwEHPEpcrel:
		v += fieldAddr
	case dwEHPEdatarel:
		v += dataBase
	default:
		return 0, fmt.Errorf("pointer encoding %#x (text/func-relative)", enc)
	}
	if r.ptr == 4 {
		v &= 0xffffffff
	}
	return v, nil
}
func oldEval(expr []byte, ctx *EvalContext) (uint64, error) {
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
	r := oldReader{b: expr, order: ctx.Order, ptr: ps}
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
func (x *exec) oldRun(insns []byte, insnsAddr, pc uint64, inCIE bool) error {
	t, c, row := x.t, x.cie, x.row
	r := oldReader{b: insns, order: t.arch.Order, ptr: c.AddrSize}
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
				return errOldTruncated
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
			b, err := x.oldBlock(&r)
			if err != nil {
				return err
			}
			row.CFA = Rule{Kind: RuleCFAExpression, Expr: b}
		case cfaExpression, cfaValExpr:
			reg, err := r.uleb()
			if err != nil {
				return err
			}
			b, err := x.oldBlock(&r)
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
func (x *exec) oldBlock(r *oldReader) ([]byte, error) {
	n, err := r.uleb()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, errOldTruncated
	}
	return r.bytes(int(n))
}

var errOldTruncated = errTruncated

func (t *Table) oldRow(f *FDE, pc uint64) (*Row, error) {
	if pc < f.Start || pc >= f.End {
		return nil, ErrNoFDE
	}
	row := &Row{RA: int(f.CIE.RA), SignalFrame: f.CIE.Signal, Loc: f.Start}
	if f.CIE.RA >= regs.Max {
		return nil, t.errf(f.CIE.Off, "return address column %d", f.CIE.RA)
	}
	x := &exec{t: t, cie: f.CIE, row: row, loc: f.Start}
	if err := x.oldRun(f.CIE.Initial, t.addr+f.CIE.initialOff, pc, true); err != nil {
		return nil, t.errf(f.CIE.Off, "CIE instructions: %v", err)
	}
	x.initial = row.Regs
	if x.done {
		return row, nil
	}
	if err := x.oldRun(f.Insns, t.addr+f.insnsOff, pc, false); err != nil {
		return nil, t.errf(f.Off, "FDE instructions: %v", err)
	}
	return row, nil
}

func diffRow(t *testing.T, tab *Table, f *FDE, pc uint64, row *Row, err error) {
	t.Helper()
	orow, oerr := tab.oldRow(f, pc)
	if fmt.Sprint(err) != fmt.Sprint(oerr) || !reflect.DeepEqual(row, orow) {
		t.Fatalf("Row(%#x) = %+v, %v; old %+v, %v", pc, row, err, orow, oerr)
	}
}
