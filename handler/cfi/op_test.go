package cfi

import (
	"encoding/binary"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

func evalCtx(ps int) *EvalContext {
	var rs regs.Set
	for r := 0; r < 32; r++ {
		rs.Set(r, 0x1000*uint64(r+1))
	}
	return &EvalContext{Regs: &rs, Mem: fakeMem{}, PtrSize: ps, Order: binary.LittleEndian}
}

func neg(v int64) uint64 { return uint64(v) }

// One case per DW_OP operator family (DWARF 5 §2.5.1) that CFI may use.
func TestDWOps(t *testing.T) {
	le := binary.LittleEndian
	memWord := func(a uint64) uint64 {
		var b [8]byte
		fakeMem{}.ReadAt(b[:], int64(a))
		return le.Uint64(b[:])
	}
	for _, tc := range []struct {
		name string
		expr []byte
		want uint64
	}{
		{"lit0", []byte{0x30}, 0},
		{"lit31", []byte{0x4f}, 31},
		{"addr", cat([]byte{0x03}, le.AppendUint64(nil, 0x123456789)), 0x123456789},
		{"const1u", []byte{0x08, 0xff}, 0xff},
		{"const1s", []byte{0x09, 0xff}, neg(-1)},
		{"const2u", []byte{0x0a, 0x34, 0x12}, 0x1234},
		{"const2s", []byte{0x0b, 0xfe, 0xff}, neg(-2)},
		{"const4u", []byte{0x0c, 0x78, 0x56, 0x34, 0x12}, 0x12345678},
		{"const4s", []byte{0x0d, 0xfd, 0xff, 0xff, 0xff}, neg(-3)},
		{"const8u", cat([]byte{0x0e}, le.AppendUint64(nil, 1<<40)), 1 << 40},
		{"const8s", cat([]byte{0x0f}, le.AppendUint64(nil, neg(-4))), neg(-4)},
		{"constu", cat([]byte{0x10}, uleb(300)), 300},
		{"consts", cat([]byte{0x11}, sleb(-300)), neg(-300)},
		{"dup", []byte{0x33, 0x12, 0x22}, 6},
		{"drop", []byte{0x33, 0x34, 0x13}, 3},
		{"over", []byte{0x33, 0x34, 0x14}, 3},
		{"pick", []byte{0x33, 0x34, 0x35, 0x15, 2}, 3},
		{"swap", []byte{0x34, 0x33, 0x16, 0x1c}, 0xffffffffffffffff}, // 3 - 4
		{"rot", []byte{0x31, 0x32, 0x33, 0x17}, 2},
		{"abs", cat([]byte{0x11}, sleb(-5), []byte{0x19}), 5},
		{"and", []byte{0x3c, 0x3a, 0x1a}, 8},
		{"div is signed", cat([]byte{0x11}, sleb(-6), []byte{0x32, 0x1b}), neg(-3)},
		{"minus", []byte{0x3a, 0x33, 0x1c}, 7},
		{"mod", []byte{0x3a, 0x33, 0x1d}, 1},
		{"mul", []byte{0x36, 0x37, 0x1e}, 42},
		{"neg", []byte{0x35, 0x1f}, neg(-5)},
		{"not", []byte{0x30, 0x20}, ^uint64(0)},
		{"or", []byte{0x31, 0x32, 0x21}, 3},
		{"plus", []byte{0x31, 0x32, 0x22}, 3},
		{"plus_uconst", cat([]byte{0x31, 0x23}, uleb(1000)), 1001},
		{"shl", []byte{0x31, 0x34, 0x24}, 16},
		{"shr", []byte{0x40, 0x32, 0x25}, 4},
		{"shra", cat([]byte{0x11}, sleb(-8), []byte{0x31, 0x26}), neg(-4)},
		{"xor", []byte{0x33, 0x35, 0x27}, 6},
		{"eq", []byte{0x33, 0x33, 0x29}, 1},
		{"ge", []byte{0x33, 0x34, 0x2a}, 0},
		{"gt", []byte{0x34, 0x33, 0x2b}, 1},
		{"le", []byte{0x33, 0x33, 0x2c}, 1},
		{"lt", []byte{0x34, 0x33, 0x2d}, 0},
		{"ne", []byte{0x34, 0x33, 0x2e}, 1},
		{"comparisons are signed", cat([]byte{0x11}, sleb(-1), []byte{0x31, 0x2d}), 1},
		{"skip", []byte{0x31, 0x2f, 1, 0, 0x39, 0x32, 0x22}, 3},
		{"bra taken", []byte{0x35, 0x31, 0x28, 1, 0, 0x37, 0x30, 0x22}, 5},
		{"bra not taken", []byte{0x35, 0x30, 0x28, 1, 0, 0x37, 0x30, 0x22}, 7},
		{"breg7", cat([]byte{0x77}, sleb(-8)), 0x8000 - 8},
		{"bregx", cat([]byte{0x92}, uleb(20), sleb(16)), 0x15000 + 16},
		{"deref", []byte{0x71, 0, 0x06}, memWord(0x2000)},
		{"deref_size 4", []byte{0x71, 0, 0x94, 4}, memWord(0x2000) & 0xffffffff},
		{"deref_size 1", []byte{0x71, 1, 0x94, 1}, 0x01},
		{"nop", []byte{0x96, 0x35}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Eval(tc.expr, evalCtx(8))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestDWOpsAddressSize4(t *testing.T) {
	got, err := Eval([]byte{0x30, 0x31, 0x1c}, evalCtx(4)) // 0 - 1
	if err != nil || got != 0xffffffff {
		t.Errorf("got %#x %v, want arithmetic modulo 2^32", got, err)
	}
}

func TestInitialStackValue(t *testing.T) {
	ctx := evalCtx(8)
	ctx.Initial = []uint64{0x7000}
	if got, err := Eval([]byte{0x23, 8}, ctx); err != nil || got != 0x7008 {
		t.Errorf("got %#x %v: the CFA pushed first (DWARF 5 §6.4.2.3)", got, err)
	}
}

func TestDWOpErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		expr []byte
	}{
		{"empty", nil},
		{"stack underflow", []byte{0x13}},
		{"binary op on one value", []byte{0x31, 0x22}},
		{"division by zero", []byte{0x31, 0x30, 0x1b}},
		{"modulo by zero", []byte{0x31, 0x30, 0x1d}},
		{"infinite loop", []byte{0x2f, 0xfd, 0xff}},
		{"unknown operator", []byte{0xff}},
		{"truncated operand", []byte{0x0e, 1, 2}},
		{"skip out of the expression", []byte{0x2f, 0x10, 0}},
		{"pick beyond the stack", []byte{0x31, 0x15, 9}},
		{"deref_size too big", []byte{0x71, 0, 0x94, 9}},
		{"stack overflow", func() []byte {
			b := []byte{0x31}
			for i := 0; i < 5000; i++ {
				b = append(b, 0x12)
			}
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := Eval(tc.expr, evalCtx(8)); err == nil {
				t.Errorf("no error (got %#x)", got)
			}
		})
	}
}
