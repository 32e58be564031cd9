package cfi

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

// Hand-assembled CFI, one test per DW_CFA opcode (DWARF 5 §6.4.2 and the
// GNU extensions). The CIE says: code_align 1, data_align -8, return
// address column 16, CFA = r7+8, r16 at CFA-8 (x86_64's usual start). The
// FDE covers [0x1000, 0x1100).

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		done := (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0)
		if !done {
			c |= 0x80
		}
		b = append(b, c)
		if done {
			return b
		}
	}
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

var cieInit = []byte{0x0c, 7, 8, 0x90, 1} // def_cfa r7 8; offset r16 1*-8

// debugFrame assembles a .debug_frame (CIE version 4, 8-byte addresses).
func debugFrame(cieInsns, fdeInsns []byte) []byte {
	le := binary.LittleEndian
	cieBody := cat([]byte{0xff, 0xff, 0xff, 0xff, 4, 0, 8, 0}, uleb(1), sleb(-8), uleb(16), cieInsns)
	for (len(cieBody)+4)%8 != 0 {
		cieBody = append(cieBody, 0) // DW_CFA_nop padding
	}
	cie := le.AppendUint32(nil, uint32(len(cieBody)))
	cie = append(cie, cieBody...)
	fdeBody := le.AppendUint32(nil, 0) // CIE at offset 0
	fdeBody = le.AppendUint64(fdeBody, 0x1000)
	fdeBody = le.AppendUint64(fdeBody, 0x100)
	fdeBody = append(fdeBody, fdeInsns...)
	for (len(fdeBody)+4)%8 != 0 {
		fdeBody = append(fdeBody, 0)
	}
	fde := le.AppendUint32(nil, uint32(len(fdeBody)))
	return cat(cie, fde, fdeBody)
}

func rowAt(t *testing.T, fdeInsns []byte, pc uint64, aarch64 bool) *Row {
	t.Helper()
	row, err := rowErr(fdeInsns, pc, aarch64)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func rowErr(fdeInsns []byte, pc uint64, aarch64 bool) (*Row, error) {
	tab, err := NewDebugFrame(debugFrame(cieInit, fdeInsns), Arch{PtrSize: 8, Order: binary.LittleEndian, AArch64: aarch64})
	if err != nil {
		return nil, err
	}
	fde, err := tab.Lookup(pc)
	if err != nil {
		return nil, err
	}
	return tab.Row(fde, pc)
}

func cfaIs(reg uint64, off int64) Rule { return Rule{Kind: RuleCFARegOffset, Reg: reg, Offset: off} }

func TestCFAOpcodes(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		name  string
		insns []byte
		pc    uint64
		reg   int  // register to check, -1 for none
		want  Rule // its rule
		cfa   Rule // the CFA rule (zero: not checked)
	}{
		{"initial state from the CIE", nil, 0x1000, 16, Rule{Kind: RuleOffset, Offset: -8}, cfaIs(7, 8)},
		{"advance_loc applies later rows only after the advance", []byte{0x44, 0x0e, 16}, 0x1003, -1, Rule{}, cfaIs(7, 8)},
		{"advance_loc", []byte{0x44, 0x0e, 16}, 0x1004, -1, Rule{}, cfaIs(7, 16)},
		{"advance_loc1", []byte{0x02, 0x80, 0x0e, 24}, 0x1080, -1, Rule{}, cfaIs(7, 24)},
		{"advance_loc2", cat([]byte{0x03}, le.AppendUint16(nil, 0xf0), []byte{0x0e, 24}), 0x10f0, -1, Rule{}, cfaIs(7, 24)},
		{"advance_loc4", cat([]byte{0x04}, le.AppendUint32(nil, 0x20), []byte{0x0e, 24}), 0x101f, -1, Rule{}, cfaIs(7, 8)},
		{"set_loc", cat([]byte{0x01}, le.AppendUint64(nil, 0x1010), []byte{0x0e, 32}), 0x1010, -1, Rule{}, cfaIs(7, 32)},
		{"offset", []byte{0x83, 2}, 0x1000, 3, Rule{Kind: RuleOffset, Offset: -16}, Rule{}},
		{"offset_extended", cat([]byte{0x05}, uleb(20), uleb(3)), 0x1000, 20, Rule{Kind: RuleOffset, Offset: -24}, Rule{}},
		{"offset_extended_sf", cat([]byte{0x11}, uleb(3), sleb(-2)), 0x1000, 3, Rule{Kind: RuleOffset, Offset: 16}, Rule{}},
		{"GNU_negative_offset_extended", cat([]byte{0x2f}, uleb(3), uleb(2)), 0x1000, 3, Rule{Kind: RuleOffset, Offset: 16}, Rule{}},
		{"restore goes back to the CIE's rule", []byte{0x90, 3, 0x41, 0xd0}, 0x1001, 16, Rule{Kind: RuleOffset, Offset: -8}, Rule{}},
		{"restore_extended", cat([]byte{0x90, 3, 0x41, 0x06}, uleb(16)), 0x1001, 16, Rule{Kind: RuleOffset, Offset: -8}, Rule{}},
		{"restore of a register the CIE left alone", []byte{0x83, 2, 0x41, 0xc3}, 0x1001, 3, Rule{}, Rule{}},
		{"undefined", []byte{0x07, 16}, 0x1000, 16, Rule{Kind: RuleUndefined}, Rule{}},
		{"same_value", []byte{0x08, 6}, 0x1000, 6, Rule{Kind: RuleSameValue}, Rule{}},
		{"register", []byte{0x09, 16, 3}, 0x1000, 16, Rule{Kind: RuleRegister, Reg: 3}, Rule{}},
		{"remember_state/restore_state", []byte{0x0e, 16, 0x0a, 0x41, 0x0e, 32, 0x83, 2, 0x41, 0x0b}, 0x1002, 3, Rule{}, cfaIs(7, 16)},
		{"state kept between remember and restore", []byte{0x0e, 16, 0x0a, 0x41, 0x0e, 32, 0x41, 0x0b}, 0x1001, -1, Rule{}, cfaIs(7, 32)},
		{"def_cfa", []byte{0x0c, 6, 16}, 0x1000, -1, Rule{}, cfaIs(6, 16)},
		{"def_cfa_sf", cat([]byte{0x12, 6}, sleb(-2)), 0x1000, -1, Rule{}, cfaIs(6, 16)},
		{"def_cfa_register", []byte{0x0d, 6}, 0x1000, -1, Rule{}, cfaIs(6, 8)},
		{"def_cfa_offset", []byte{0x0e, 0x80, 1}, 0x1000, -1, Rule{}, cfaIs(7, 128)},
		{"def_cfa_offset_sf", cat([]byte{0x13}, sleb(-4)), 0x1000, -1, Rule{}, cfaIs(7, 32)},
		{"def_cfa_expression", []byte{0x0f, 2, 0x77, 8}, 0x1000, -1, Rule{}, Rule{Kind: RuleCFAExpression, Expr: []byte{0x77, 8}}},
		{"expression", []byte{0x10, 6, 2, 0x77, 16}, 0x1000, 6, Rule{Kind: RuleExpression, Expr: []byte{0x77, 16}}, Rule{}},
		{"val_offset", cat([]byte{0x14, 6}, uleb(2)), 0x1000, 6, Rule{Kind: RuleValOffset, Offset: -16}, Rule{}},
		{"val_offset_sf", cat([]byte{0x15, 6}, sleb(-2)), 0x1000, 6, Rule{Kind: RuleValOffset, Offset: 16}, Rule{}},
		{"val_expression", []byte{0x16, 6, 1, 0x31}, 0x1000, 6, Rule{Kind: RuleValExpression, Expr: []byte{0x31}}, Rule{}},
		{"nop", []byte{0x00, 0x00, 0x83, 2}, 0x1000, 3, Rule{Kind: RuleOffset, Offset: -16}, Rule{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := rowAt(t, tc.insns, tc.pc, false)
			if tc.reg >= 0 && !sameRule(row.Regs[tc.reg], tc.want) {
				t.Errorf("r%d: got %+v, want %+v", tc.reg, row.Regs[tc.reg], tc.want)
			}
			if tc.cfa.Kind != RuleUnset && !sameRule(row.CFA, tc.cfa) {
				t.Errorf("CFA: got %+v, want %+v", row.CFA, tc.cfa)
			}
		})
	}
}

func sameRule(a, b Rule) bool {
	return a.Kind == b.Kind && a.Reg == b.Reg && a.Offset == b.Offset && string(a.Expr) == string(b.Expr)
}

func TestGNUArgsSize(t *testing.T) {
	if row := rowAt(t, cat([]byte{0x2e}, uleb(32)), 0x1000, false); row.ArgsSize != 32 {
		t.Errorf("args size %d", row.ArgsSize)
	}
}

// DW_CFA_AARCH64_negate_ra_state toggles whether the return address is
// signed (pointer authentication); the unwinder strips it then.
func TestNegateRAState(t *testing.T) {
	insns := []byte{0x2d, 0x44, 0x2d}
	if row := rowAt(t, insns, 0x1000, true); !row.RASigned {
		t.Error("not signed after one negate_ra_state")
	}
	if row := rowAt(t, insns, 0x1004, true); row.RASigned {
		t.Error("still signed after the second")
	}
	row := rowAt(t, []byte{0x2d, 0x0a, 0x41, 0x2d, 0x41, 0x0b}, 0x1002, true)
	if !row.RASigned {
		t.Error("restore_state must bring back the signed state")
	}
}

func TestBadInstructionsAreErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		insns []byte
	}{
		{"restore_state without remember", []byte{0x0b}},
		{"truncated operand", []byte{0x05, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, // no padding after it
		{"unknown opcode", []byte{0x3f}},
		{"expression longer than the FDE", []byte{0x10, 6, 50, 0x77}},
		{"too many remembered states", func() []byte {
			b := make([]byte, 200)
			for i := range b {
				b[i] = 0x0a
			}
			return b
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rowErr(tc.insns, 0x1000, false); err == nil {
				t.Errorf("no error")
			}
		})
	}
}

// Columns beyond the registers we track are ignored, as libgcc ignores
// columns beyond DWARF_FRAME_REGISTERS: a vendor's extra column must not
// cost the whole frame.
func TestHugeRegisterColumnIgnored(t *testing.T) {
	row := rowAt(t, cat([]byte{0x05}, uleb(100000), uleb(1), []byte{0x83, 2}), 0x1000, false)
	if row.Regs[3].Kind != RuleOffset {
		t.Errorf("rules after the ignored column lost: %+v", row.Regs[3])
	}
}

// Step applies a row: CFA = sp+16, return address saved at CFA-8, rbp
// at CFA-16.
func TestStepRecoversCaller(t *testing.T) {
	row := rowAt(t, []byte{0x0e, 16, 0x86, 2}, 0x1000, false)
	var rs regs.Set
	rs.Set(7, 0x7000)
	rs.Set(6, 0xdead)
	rs.Set(3, 0x33)
	mem := fakeMem{} // byte i at address a is a+i
	caller, cfa, ra, err := row.Step(&rs, mem, 7, Arch{PtrSize: 8, Order: binary.LittleEndian})
	if err != nil {
		t.Fatal(err)
	}
	word := func(a uint64) uint64 {
		var b [8]byte
		mem.ReadAt(b[:], int64(a))
		return binary.LittleEndian.Uint64(b[:])
	}
	if cfa != 0x7010 || ra != word(0x7008) {
		t.Errorf("cfa %#x ra %#x", cfa, ra)
	}
	if sp, _ := caller.Get(7); sp != 0x7010 {
		t.Errorf("caller sp %#x, want the CFA", sp)
	}
	if bp, _ := caller.Get(6); bp != word(0x7000) {
		t.Errorf("caller rbp %#x", bp)
	}
	if v, _ := caller.Get(3); v != 0x33 {
		t.Errorf("callee-saved rbx without a rule must keep its value, got %#x", v)
	}
	row = rowAt(t, []byte{0x07, 16}, 0x1000, false)
	if _, _, _, err := row.Step(&rs, mem, 7, Arch{PtrSize: 8, Order: binary.LittleEndian}); !errors.Is(err, ErrUndefinedRA) {
		t.Errorf("undefined return address: %v", err)
	}
}
