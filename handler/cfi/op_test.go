package cfi

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

func TestEval(t *testing.T) {
	le := binary.LittleEndian
	u16 := func(v uint16) []byte { return le.AppendUint16(nil, v) }
	u32 := func(v uint32) []byte { return le.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return le.AppendUint64(nil, v) }
	skip := func(op byte, d int16) []byte { return cat(op, u16(uint16(d))) }
	mem := fakeMem{}
	mem.put64(le, 0x8000, 0x1122334455667788)
	mem.put64(binary.BigEndian, 0x9000, 0x1122334455667788)
	var rs regs.Set
	rs.Set(rRSP, 0x7000)
	rs.Set(rRBP, 0x8000)
	rs.Set(70, 5)

	tests := []struct {
		name    string
		expr    []byte
		initial []uint64
		ps      int
		order   binary.ByteOrder
		nilRegs bool
		want    uint64
		err     string
	}{
		// Literals and constants.
		{name: "lit0", expr: cat(0x30), want: 0},
		{name: "lit31", expr: cat(0x4f), want: 31},
		{name: "addr", expr: cat(0x03, u64(0xdeadbeef00)), want: 0xdeadbeef00},
		{name: "addr 32-bit", ps: 4, expr: cat(0x03, u32(0xdeadbeef)), want: 0xdeadbeef},
		{name: "const1u", expr: cat(0x08, 0xff), want: 0xff},
		{name: "const1s", expr: cat(0x09, 0xff), want: ^uint64(0)},
		{name: "const2u", expr: cat(0x0a, u16(0xfffe)), want: 0xfffe},
		{name: "const2s", expr: cat(0x0b, u16(0xfffe)), want: ^uint64(1)},
		{name: "const4u", expr: cat(0x0c, u32(0xfffffffd)), want: 0xfffffffd},
		{name: "const4s", expr: cat(0x0d, u32(0xfffffffd)), want: ^uint64(2)},
		{name: "const8u", expr: cat(0x0e, u64(0x0102030405060708)), want: 0x0102030405060708},
		{name: "const8s", expr: cat(0x0f, u64(^uint64(3))), want: ^uint64(3)},
		{name: "constu", expr: cat(0x10, uleb(624485)), want: 624485},
		{name: "consts", expr: cat(0x11, sleb(-123456)), want: uint64(0xfffffffffffe1dc0)},
		{name: "consts masked to 32 bits", ps: 4, expr: cat(0x11, sleb(-1)), want: 0xffffffff},
		{name: "const truncated", expr: cat(0x0c, 0x01), err: "truncated"},
		// Stack operations.
		{name: "dup", expr: cat(0x35, 0x12, 0x22), want: 10},
		{name: "drop", expr: cat(0x31, 0x32, 0x13), want: 1},
		{name: "over", expr: cat(0x31, 0x32, 0x14), want: 1},
		{name: "pick 0", expr: cat(0x31, 0x32, 0x15, 0), want: 2},
		{name: "pick 2", expr: cat(0x31, 0x32, 0x33, 0x15, 2), want: 1},
		{name: "pick past the stack", expr: cat(0x31, 0x15, 1), err: "pick"},
		{name: "swap", expr: cat(0x31, 0x32, 0x16), want: 1},
		{name: "swap then minus", expr: cat(0x31, 0x35, 0x16, 0x1c), want: 4},
		// rot: (a b c) -> (c a b), top is b.
		{name: "rot top", expr: cat(0x31, 0x32, 0x33, 0x17), want: 2},
		{name: "rot third", expr: cat(0x31, 0x32, 0x33, 0x17, 0x13, 0x13), want: 3},
		{name: "initial value on the stack", initial: []uint64{0x7000}, expr: cat(0x23, uleb(16)), want: 0x7010},
		// Memory.
		{name: "deref", expr: cat(0x0c, u32(0x8000), 0x06), want: 0x1122334455667788},
		{name: "deref 32-bit", ps: 4, expr: cat(0x0c, u32(0x8000), 0x06), want: 0x55667788},
		{name: "deref_size 1", expr: cat(0x0c, u32(0x8000), 0x94, 1), want: 0x88},
		{name: "deref_size 2", expr: cat(0x0c, u32(0x8000), 0x94, 2), want: 0x7788},
		{name: "deref_size 4", expr: cat(0x0c, u32(0x8000), 0x94, 4), want: 0x55667788},
		{name: "deref_size 4 big-endian", order: binary.BigEndian,
			expr: cat(0x0c, binary.BigEndian.AppendUint32(nil, 0x9000), 0x94, 4), want: 0x11223344},
		{name: "deref_size 0", expr: cat(0x0c, u32(0x8000), 0x94, 0), err: "deref_size"},
		{name: "deref_size larger than a pointer", expr: cat(0x0c, u32(0x8000), 0x94, 9), err: "deref_size"},
		{name: "deref unmapped", expr: cat(0x0c, u32(0x100), 0x06), err: "unmapped"},
		{name: "deref through a register", expr: cat(0x76, sleb(0), 0x06), want: 0x1122334455667788},
		{name: "xderef is unsupported", expr: cat(0x30, 0x30, 0x18), err: "unsupported"},
		// Arithmetic and logic.
		{name: "abs", expr: cat(0x11, sleb(-7), 0x19), want: 7},
		{name: "abs 32-bit", ps: 4, expr: cat(0x11, sleb(-7), 0x19), want: 7},
		{name: "and", expr: cat(0x10, uleb(0xff0), 0x10, uleb(0x0ff), 0x1a), want: 0x0f0},
		{name: "div is signed", expr: cat(0x11, sleb(-12), 0x34, 0x1b), want: ^uint64(2)},
		{name: "div by -1 of the minimum", expr: cat(0x0e, u64(1<<63), 0x11, sleb(-1), 0x1b), want: 1 << 63},
		{name: "div by zero", expr: cat(0x31, 0x30, 0x1b), err: "division by zero"},
		{name: "minus", expr: cat(0x35, 0x37, 0x1c), want: ^uint64(1)},
		{name: "minus 32-bit wraps", ps: 4, expr: cat(0x35, 0x37, 0x1c), want: 0xfffffffe},
		{name: "mod", expr: cat(0x3b, 0x34, 0x1d), want: 3},
		{name: "mod by zero", expr: cat(0x31, 0x30, 0x1d), err: "modulo by zero"},
		{name: "mul", expr: cat(0x36, 0x37, 0x1e), want: 42},
		{name: "neg", expr: cat(0x35, 0x1f), want: ^uint64(4)},
		{name: "not", expr: cat(0x30, 0x20), want: ^uint64(0)},
		{name: "not 32-bit", ps: 4, expr: cat(0x30, 0x20), want: 0xffffffff},
		{name: "or", expr: cat(0x31, 0x32, 0x21), want: 3},
		{name: "plus", expr: cat(0x31, 0x32, 0x22), want: 3},
		{name: "plus_uconst", expr: cat(0x31, 0x23, uleb(300)), want: 301},
		{name: "plus_uconst 32-bit wraps", ps: 4, expr: cat(0x0c, u32(0xffffffff), 0x23, uleb(2)), want: 1},
		{name: "xor", expr: cat(0x33, 0x35, 0x27), want: 6},
		// Shifts.
		{name: "shl", expr: cat(0x31, 0x34, 0x24), want: 16},
		{name: "shl by 64", expr: cat(0x31, 0x08, 64, 0x24), want: 0},
		{name: "shr", expr: cat(0x08, 0x80, 0x34, 0x25), want: 8},
		{name: "shr is logical", expr: cat(0x11, sleb(-16), 0x34, 0x25), want: 0x0fffffffffffffff},
		{name: "shr by 64", expr: cat(0x11, sleb(-1), 0x08, 64, 0x25), want: 0},
		{name: "shra is arithmetic", expr: cat(0x11, sleb(-16), 0x32, 0x26), want: ^uint64(3)},
		{name: "shra by 64", expr: cat(0x11, sleb(-16), 0x08, 64, 0x26), want: ^uint64(0)},
		{name: "shra 32-bit", ps: 4, expr: cat(0x0c, u32(0x80000000), 0x4f, 0x26), want: 0xffffffff},
		// Comparisons (signed).
		{name: "eq true", expr: cat(0x33, 0x33, 0x29), want: 1},
		{name: "eq false", expr: cat(0x33, 0x34, 0x29), want: 0},
		{name: "ge", expr: cat(0x34, 0x33, 0x2a), want: 1},
		{name: "gt is signed", expr: cat(0x11, sleb(-1), 0x31, 0x2b), want: 0},
		{name: "le", expr: cat(0x33, 0x33, 0x2c), want: 1},
		{name: "lt is signed", expr: cat(0x11, sleb(-1), 0x31, 0x2d), want: 1},
		{name: "ne", expr: cat(0x33, 0x34, 0x2e), want: 1},
		// Control flow.
		{name: "skip forward", expr: cat(0x31, skip(0x2f, 1), 0x32), want: 1},
		{name: "skip to the end", expr: cat(0x31, skip(0x2f, 0)), want: 1},
		{name: "skip out of the expression", expr: cat(0x31, skip(0x2f, 5)), err: "outside"},
		{name: "skip before the expression", expr: cat(0x31, skip(0x2f, -10)), err: "outside"},
		{name: "bra taken", expr: cat(0x35, 0x31, skip(0x28, 1), 0x36), want: 5},
		{name: "bra not taken", expr: cat(0x35, 0x30, skip(0x28, 1), 0x36), want: 6},
		// Counts 5 down to 0: lit5; L: dup; bra +3 -> dec; skip +4 -> end;
		// dec: lit1; minus; skip back to L.
		{name: "bra loop terminates", expr: cat(0x35, 0x12, skip(0x28, 3), skip(0x2f, 5), 0x31, 0x1c, skip(0x2f, -12)), want: 0},
		{name: "infinite loop hits the step limit", expr: cat(0x31, skip(0x2f, -3)), err: "steps"},
		{name: "bra backwards forever", expr: cat(0x31, 0x12, skip(0x28, -4)), err: ""},
		// Registers.
		{name: "breg", expr: cat(0x77, sleb(16)), want: 0x7010},
		{name: "breg negative", expr: cat(0x77, sleb(-16)), want: 0x6ff0},
		{name: "bregx", expr: cat(0x92, uleb(70), sleb(1)), want: 6},
		{name: "breg of an unknown register", expr: cat(0x70, sleb(0)), err: "register 0 unknown"},
		{name: "bregx beyond the set", expr: cat(0x92, uleb(1000), sleb(0)), err: "unknown"},
		{name: "breg without registers", nilRegs: true, expr: cat(0x77, sleb(0)), err: "register"},
		{name: "reg is a location", expr: cat(0x57), err: "unsupported"},
		{name: "regx is a location", expr: cat(0x90, uleb(3)), err: "unsupported"},
		// Misc.
		{name: "nop", expr: cat(0x96, 0x33, 0x96), want: 3},
		{name: "stack_value", expr: cat(0x33, 0x9f), want: 3},
		// Bounded failures.
		{name: "empty expression", expr: nil, err: "empty stack"},
		{name: "underflow dup", expr: cat(0x12), err: "underflow"},
		{name: "underflow drop", expr: cat(0x13), err: "underflow"},
		{name: "underflow over", expr: cat(0x30, 0x14), err: "underflow"},
		{name: "underflow swap", expr: cat(0x30, 0x16), err: "underflow"},
		{name: "underflow rot", expr: cat(0x30, 0x30, 0x17), err: "underflow"},
		{name: "underflow plus", expr: cat(0x30, 0x22), err: "underflow"},
		{name: "underflow deref", expr: cat(0x06), err: "underflow"},
		{name: "underflow bra", expr: cat(skip(0x28, 0)), err: "underflow"},
		{name: "underflow neg", expr: cat(0x1f), err: "underflow"},
		{name: "underflow plus_uconst", expr: cat(0x23, 1), err: "underflow"},
		{name: "stack overflow", expr: cat(0x30, skip(0x2f, -4)), err: "stack deeper"},
		{name: "unknown opcode", expr: cat(0x30, 0xe0), err: "unsupported"},
		{name: "zero opcode", expr: cat(0x00), err: "unsupported"},
		{name: "bad pointer size", ps: 3, expr: cat(0x30), err: "pointer size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := tc.ps
			if ps == 0 {
				ps = 8
			}
			order := tc.order
			if order == nil {
				order = le
			}
			ctx := &EvalContext{Regs: &rs, Mem: mem, PtrSize: ps, Order: order, Initial: tc.initial}
			if tc.nilRegs {
				ctx.Regs = nil
			}
			got, err := Eval(tc.expr, ctx)
			if tc.err != "" || strings.HasPrefix(tc.name, "bra backwards") {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Eval = %#x, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			if got != tc.want {
				t.Errorf("Eval = %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestEvalUnsupportedIsErrExprUnsupported(t *testing.T) {
	_, err := Eval([]byte{0x50}, &EvalContext{Regs: &regs.Set{}, PtrSize: 8, Order: binary.LittleEndian})
	if !errors.Is(err, ErrExprUnsupported) {
		t.Fatalf("err = %v, want ErrExprUnsupported", err)
	}
}

func TestEvalNoMemory(t *testing.T) {
	_, err := Eval([]byte{0x30, 0x06}, &EvalContext{Regs: &regs.Set{}, PtrSize: 8, Order: binary.LittleEndian})
	if err == nil || !strings.Contains(err.Error(), "no memory") {
		t.Fatalf("err = %v", err)
	}
}

// RVV code's CFI reads vlenb (DWARF 7202, DW_OP_bregx): the unwinder has
// no value for it, and says so with ErrRegUnknown so the frame can fall to
// other strategies.
func TestEvalVLenB(t *testing.T) {
	var rs regs.Set
	rs.Set(2, 0x1000)
	expr := append([]byte{opBregx}, uleb(7202)...)
	expr = append(expr, sleb(0)...)
	_, err := Eval(expr, &EvalContext{Regs: &rs, PtrSize: 8, Order: binary.LittleEndian})
	if !errors.Is(err, ErrRegUnknown) {
		t.Errorf("Eval(bregx 7202) = %v, want ErrRegUnknown", err)
	}
}
