package cfi

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

const (
	testEHAddr   = 0x2000
	testFDEStart = 0x1000
	testFDELen   = 0x100
)

// x86CIE is a typical GCC x86-64 CIE: CFA = rsp+8, RA at cfa-8.
func x86CIE() cieSpec {
	return cieSpec{
		aug: "zR", codeAlign: 1, dataAlign: -8, ra: rRA,
		augData: []byte{dwEHPEpcrel | dwEHPEsdata4},
		initial: cat(0x0c, uleb(rRSP), uleb(8), 0x80|rRA, uleb(1)),
	}
}

// buildEH assembles an .eh_frame at testEHAddr holding c and one FDE over
// [testFDEStart, testFDEStart+testFDELen) with insns.
func buildEH(c cieSpec, insns []byte) []byte { return buildEHPad(c, insns, true) }

func buildEHPad(c cieSpec, insns []byte, pad bool) []byte {
	s := newSection(false, 8, binary.LittleEndian, testEHAddr)
	s.noPad = !pad
	co := s.cie(c)
	enc := byte(dwEHPEabsptr)
	if strings.Contains(c.aug, "R") {
		enc = c.augData[strings.Index(c.aug, "R")-1]
	}
	s.fde(co, enc, strings.HasPrefix(c.aug, "z"), fdeSpec{start: testFDEStart, length: testFDELen, insns: insns})
	s.terminator()
	return s.b
}

func rowAt(t *testing.T, data []byte, a Arch, pc uint64) (*Row, error) {
	t.Helper()
	tab, err := NewEHFrame(data, testEHAddr, nil, 0, a)
	if err != nil {
		t.Fatalf("NewEHFrame: %v", err)
	}
	f, err := tab.Lookup(pc)
	if err != nil {
		t.Fatalf("Lookup(%#x): %v", pc, err)
	}
	return tab.Row(f, pc)
}

func regOff(off int64) Rule { return Rule{Kind: RuleOffset, Offset: off} }
func cfaRule(reg uint64, off int64) Rule {
	return Rule{Kind: RuleCFARegOffset, Reg: reg, Offset: off}
}

func TestRowOpcodes(t *testing.T) {
	u16 := func(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	expr := []byte{0x77, 0x08, 0x06} // DW_OP_breg7 8; DW_OP_deref
	base := cfaRule(rRSP, 8)
	type want struct {
		cfa      Rule
		regs     map[int]Rule // changes from the CIE's rules
		loc      uint64
		argsSize uint64
		signed   bool
	}
	tests := []struct {
		name  string
		cie   func(*cieSpec)
		arch  Arch
		insns []byte
		pc    uint64
		want  want
		err   string
		noPad bool // truncation tests: no DW_CFA_nop padding after insns
	}{
		{name: "CIE initial row", pc: 0x1000, want: want{cfa: base, loc: 0x1000}},
		{name: "advance_loc stops before a later row",
			insns: cat(0x40|4, 0x0e, uleb(16)), pc: 0x1003, want: want{cfa: base, loc: 0x1000}},
		{name: "advance_loc reaches its row",
			insns: cat(0x40|4, 0x0e, uleb(16)), pc: 0x1004, want: want{cfa: cfaRule(rRSP, 16), loc: 0x1004}},
		{name: "advance_loc is factored by code alignment",
			cie:   func(c *cieSpec) { c.codeAlign = 4 },
			insns: cat(0x40|1, 0x0e, uleb(16)), pc: 0x1004, want: want{cfa: cfaRule(rRSP, 16), loc: 0x1004}},
		{name: "advance_loc factored stops before",
			cie:   func(c *cieSpec) { c.codeAlign = 4 },
			insns: cat(0x40|1, 0x0e, uleb(16)), pc: 0x1003, want: want{cfa: base, loc: 0x1000}},
		{name: "advance_loc in the CIE carries into the FDE",
			cie:   func(c *cieSpec) { c.initial = append(c.initial, 0x42) },
			insns: cat(0x42, 0x0e, uleb(16)), pc: 0x1003, want: want{cfa: base, loc: 0x1002}},
		{name: "advance_loc in the CIE then the FDE's row",
			cie:   func(c *cieSpec) { c.initial = append(c.initial, 0x42) },
			insns: cat(0x42, 0x0e, uleb(16)), pc: 0x1004, want: want{cfa: cfaRule(rRSP, 16), loc: 0x1004}},
		{name: "advance_loc in the CIE past pc stops everything",
			cie:   func(c *cieSpec) { c.initial = append(c.initial, 0x42, 0x0e, 32) },
			insns: cat(0x0e, uleb(16)), pc: 0x1001, want: want{cfa: base, loc: 0x1000}},
		{name: "advance_loc wrapping the address space stops",
			cie:   func(c *cieSpec) { c.codeAlign = ^uint64(0x7ff) },
			insns: cat(0x41, 0x0e, uleb(16)), pc: 0x10ff, want: want{cfa: base, loc: 0x1000}},
		{name: "advance_loc4 overflowing 64 bits stops",
			cie:   func(c *cieSpec) { c.codeAlign = 1 << 40 },
			insns: cat(0x04, u32(0xffffffff), 0x0e, uleb(16)), pc: 0x10ff, want: want{cfa: base, loc: 0x1000}},
		{name: "advance_loc1",
			insns: cat(0x02, 0x20, 0x0e, uleb(16)), pc: 0x1020, want: want{cfa: cfaRule(rRSP, 16), loc: 0x1020}},
		{name: "advance_loc1 before",
			insns: cat(0x02, 0x20, 0x0e, uleb(16)), pc: 0x101f, want: want{cfa: base, loc: 0x1000}},
		{name: "advance_loc2",
			insns: cat(0x03, u16(0x80), 0x0e, uleb(16)), pc: 0x1080, want: want{cfa: cfaRule(rRSP, 16), loc: 0x1080}},
		{name: "advance_loc4",
			insns: cat(0x04, u32(0xa0), 0x0e, uleb(16)), pc: 0x10a0, want: want{cfa: cfaRule(rRSP, 16), loc: 0x10a0}},
		{name: "advance_loc4 before",
			insns: cat(0x04, u32(0xa0), 0x0e, uleb(16)), pc: 0x109f, want: want{cfa: base, loc: 0x1000}},
		{name: "offset",
			insns: cat(0x80|rRBX, uleb(2)), pc: 0x1000, want: want{cfa: base, regs: map[int]Rule{rRBX: regOff(-16)}, loc: 0x1000}},
		{name: "offset_extended",
			insns: cat(0x05, uleb(70), uleb(3)), pc: 0x1000, want: want{cfa: base, regs: map[int]Rule{70: regOff(-24)}, loc: 0x1000}},
		{name: "offset_extended_sf",
			insns: cat(0x11, uleb(rRBX), sleb(-2)), pc: 0x1000, want: want{cfa: base, regs: map[int]Rule{rRBX: regOff(16)}, loc: 0x1000}},
		{name: "restore returns to the CIE rule",
			insns: cat(0x80|rRA, uleb(3), 0x80|rRBX, uleb(2), 0x41, 0xc0|rRA, 0xc0|rRBX), pc: 0x1001,
			want: want{cfa: base, loc: 0x1001}},
		{name: "restore not yet reached",
			insns: cat(0x80|rRA, uleb(3), 0x41, 0xc0|rRA), pc: 0x1000,
			want: want{cfa: base, regs: map[int]Rule{rRA: regOff(-24)}, loc: 0x1000}},
		{name: "restore_extended",
			insns: cat(0x80|rRA, uleb(3), 0x05, uleb(70), uleb(1), 0x06, uleb(rRA), 0x06, uleb(70)), pc: 0x1000,
			want: want{cfa: base, loc: 0x1000}},
		{name: "undefined",
			insns: cat(0x07, uleb(rRA)), pc: 0x1000, want: want{cfa: base, regs: map[int]Rule{rRA: {Kind: RuleUndefined}}, loc: 0x1000}},
		{name: "same_value",
			insns: cat(0x08, uleb(rRBX)), pc: 0x1000, want: want{cfa: base, regs: map[int]Rule{rRBX: {Kind: RuleSameValue}}, loc: 0x1000}},
		{name: "register",
			insns: cat(0x09, uleb(rRBX), uleb(rR12)), pc: 0x1000, want: want{cfa: base, regs: map[int]Rule{rRBX: {Kind: RuleRegister, Reg: rR12}}, loc: 0x1000}},
		{name: "remember_state keeps the rules until restore_state",
			insns: cat(0x0a, 0x0e, uleb(32), 0x80|rRBX, uleb(2), 0x44, 0x0b), pc: 0x1003,
			want: want{cfa: cfaRule(rRSP, 32), regs: map[int]Rule{rRBX: regOff(-16)}, loc: 0x1000}},
		{name: "restore_state brings back the CFA and registers",
			insns: cat(0x0a, 0x0e, uleb(32), 0x80|rRBX, uleb(2), 0x44, 0x0b), pc: 0x1004,
			want: want{cfa: base, loc: 0x1004}},
		{name: "nested remember_state",
			insns: cat(0x0a, 0x0e, uleb(16), 0x0a, 0x0e, uleb(32), 0x0b, 0x41, 0x0b), pc: 0x1000,
			want: want{cfa: cfaRule(rRSP, 16), loc: 0x1000}},
		{name: "restore_state without remember_state",
			insns: cat(0x0b), pc: 0x1000, err: "without remember_state"},
		{name: "def_cfa",
			insns: cat(0x0c, uleb(rRBP), uleb(16)), pc: 0x1000, want: want{cfa: cfaRule(rRBP, 16), loc: 0x1000}},
		{name: "def_cfa_sf is factored",
			insns: cat(0x12, uleb(rRBP), sleb(-2)), pc: 0x1000, want: want{cfa: cfaRule(rRBP, 16), loc: 0x1000}},
		{name: "def_cfa_register keeps the offset",
			insns: cat(0x0d, uleb(rRBP)), pc: 0x1000, want: want{cfa: cfaRule(rRBP, 8), loc: 0x1000}},
		{name: "def_cfa_offset is not factored",
			insns: cat(0x0e, uleb(24)), pc: 0x1000, want: want{cfa: cfaRule(rRSP, 24), loc: 0x1000}},
		{name: "def_cfa_offset_sf is factored",
			insns: cat(0x13, sleb(-3)), pc: 0x1000, want: want{cfa: cfaRule(rRSP, 24), loc: 0x1000}},
		{name: "def_cfa_expression",
			insns: cat(0x0f, uleb(uint64(len(expr))), expr), pc: 0x1000,
			want: want{cfa: Rule{Kind: RuleCFAExpression, Expr: expr}, loc: 0x1000}},
		{name: "def_cfa_register after def_cfa_expression",
			insns: cat(0x0f, uleb(uint64(len(expr))), expr, 0x0d, uleb(rRBP)), pc: 0x1000, err: "def_cfa_register"},
		{name: "expression",
			insns: cat(0x10, uleb(rRBX), uleb(uint64(len(expr))), expr), pc: 0x1000,
			want: want{cfa: base, regs: map[int]Rule{rRBX: {Kind: RuleExpression, Expr: expr}}, loc: 0x1000}},
		{name: "expression block runs past the FDE",
			insns: cat(0x10, uleb(rRBX), uleb(200), expr), pc: 0x1000, err: "truncated"},
		{name: "val_offset",
			insns: cat(0x14, uleb(rRBX), uleb(2)), pc: 0x1000,
			want: want{cfa: base, regs: map[int]Rule{rRBX: {Kind: RuleValOffset, Offset: -16}}, loc: 0x1000}},
		{name: "val_offset_sf",
			insns: cat(0x15, uleb(rRBX), sleb(-2)), pc: 0x1000,
			want: want{cfa: base, regs: map[int]Rule{rRBX: {Kind: RuleValOffset, Offset: 16}}, loc: 0x1000}},
		{name: "val_expression",
			insns: cat(0x16, uleb(rRBX), uleb(uint64(len(expr))), expr), pc: 0x1000,
			want: want{cfa: base, regs: map[int]Rule{rRBX: {Kind: RuleValExpression, Expr: expr}}, loc: 0x1000}},
		{name: "GNU_args_size",
			insns: cat(0x2e, uleb(32)), pc: 0x1000, want: want{cfa: base, argsSize: 32, loc: 0x1000}},
		{name: "GNU_negative_offset_extended",
			insns: cat(0x2f, uleb(rRBX), uleb(2)), pc: 0x1000,
			want: want{cfa: base, regs: map[int]Rule{rRBX: regOff(16)}, loc: 0x1000}},
		{name: "AARCH64_negate_ra_state toggles",
			arch: archARM64, insns: cat(0x2d, 0x44, 0x2d), pc: 0x1000,
			want: want{cfa: base, signed: true, loc: 0x1000}},
		{name: "AARCH64_negate_ra_state twice",
			arch: archARM64, insns: cat(0x2d, 0x44, 0x2d), pc: 0x1004,
			want: want{cfa: base, loc: 0x1004}},
		{name: "AARCH64_negate_ra_state is saved by remember_state",
			arch: archARM64, insns: cat(0x0a, 0x2d, 0x44, 0x0b), pc: 0x1004,
			want: want{cfa: base, loc: 0x1004}},
		{name: "GNU_window_save is refused off AArch64",
			insns: cat(0x2d), pc: 0x1000, err: "window_save"},
		{name: "nop",
			insns: cat(0x00, 0x00, 0x0e, uleb(16), 0x00), pc: 0x1000, want: want{cfa: cfaRule(rRSP, 16), loc: 0x1000}},
		{name: "set_loc pcrel",
			insns: cat(0x01, u32(0)), // patched below
			pc:    0x1050, want: want{cfa: cfaRule(rRSP, 16), loc: 0x1050}},
		{name: "set_loc before its row",
			insns: cat(0x01, u32(0)),
			pc:    0x104f, want: want{cfa: base, loc: 0x1000}},
		{name: "unknown opcode",
			insns: cat(0x3f), pc: 0x1000, err: "unknown DW_CFA opcode"},
		{name: "truncated operand",
			insns: cat(0x0e), pc: 0x1000, err: "truncated", noPad: true},
		{name: "register out of range is ignored",
			insns: cat(0x05, uleb(1000), uleb(1)), pc: 0x1000, want: want{cfa: base, loc: 0x1000}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := x86CIE()
			if tc.cie != nil {
				tc.cie(&c)
			}
			a := tc.arch
			if a.PtrSize == 0 {
				a = archX86
			}
			insns := tc.insns
			if strings.HasPrefix(tc.name, "set_loc") {
				// set_loc 0x1050 (pcrel sdata4 from the operand), then
				// def_cfa_offset 16. The FDE body starts at a known offset:
				// CIE + FDE header are assembled first, then patched.
				insns = cat(0x01, u32(0), 0x0e, uleb(16))
			}
			data := buildEHPad(c, insns, !tc.noPad)
			if strings.HasPrefix(tc.name, "set_loc") {
				// Find the instructions: the FDE's are last before padding.
				tab, _ := NewEHFrame(data, testEHAddr, nil, 0, a)
				f, err := tab.Lookup(testFDEStart)
				if err != nil {
					t.Fatal(err)
				}
				off := cap(data) - cap(f.Insns) // offset of f.Insns in data
				field := uint64(testEHAddr + off + 1)
				binary.LittleEndian.PutUint32(data[off+1:], uint32(0x1050-field))
			}
			row, err := rowAt(t, data, a, tc.pc)
			if endsInError(t, "Row", err, tc.err) {
				return
			}
			var wantRegs [regs.Max]Rule
			wantRegs[rRA] = regOff(-8)
			for n, r := range tc.want.regs {
				wantRegs[n] = r
			}
			if !reflect.DeepEqual(row.CFA, tc.want.cfa) {
				t.Errorf("CFA = %+v, want %+v", row.CFA, tc.want.cfa)
			}
			for n := range wantRegs {
				if !reflect.DeepEqual(row.Regs[n], wantRegs[n]) {
					t.Errorf("reg %d = %+v, want %+v", n, row.Regs[n], wantRegs[n])
				}
			}
			if row.Loc != tc.want.loc {
				t.Errorf("Loc = %#x, want %#x", row.Loc, tc.want.loc)
			}
			if row.ArgsSize != tc.want.argsSize {
				t.Errorf("ArgsSize = %d, want %d", row.ArgsSize, tc.want.argsSize)
			}
			if row.RASigned != tc.want.signed {
				t.Errorf("RASigned = %v, want %v", row.RASigned, tc.want.signed)
			}
			if row.RA != rRA {
				t.Errorf("RA = %d", row.RA)
			}
		})
	}
}

// TestRowSetLocDebugFrame checks DW_CFA_set_loc's absolute address in
// .debug_frame.
func TestRowSetLocDebugFrame(t *testing.T) {
	s := newSection(true, 8, binary.LittleEndian, 0)
	c := x86CIE()
	c.aug, c.augData = "", nil
	co := s.cie(c)
	s.fde(co, 0, false, fdeSpec{start: 0x1000, length: 0x100,
		insns: cat(0x01, binary.LittleEndian.AppendUint64(nil, 0x1040), 0x0e, uleb(32))})
	tab, err := NewDebugFrame(s.b, archX86)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pc  uint64
		off int64
	}{{0x103f, 8}, {0x1040, 32}, {0x10ff, 32}} {
		f, err := tab.Lookup(tc.pc)
		if err != nil {
			t.Fatal(err)
		}
		row, err := tab.Row(f, tc.pc)
		if err != nil {
			t.Fatal(err)
		}
		if row.CFA.Offset != tc.off {
			t.Errorf("pc %#x: CFA offset %d, want %d", tc.pc, row.CFA.Offset, tc.off)
		}
	}
}

func TestRowOutsideFDE(t *testing.T) {
	data := buildEH(x86CIE(), nil)
	tab, _ := NewEHFrame(data, testEHAddr, nil, 0, archX86)
	f, err := tab.Lookup(0x1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range []uint64{0xfff, 0x1100} {
		if _, err := tab.Row(f, pc); err != ErrNoFDE {
			t.Errorf("Row(%#x) err = %v, want ErrNoFDE", pc, err)
		}
		if _, err := tab.Lookup(pc); err != ErrNoFDE {
			t.Errorf("Lookup(%#x) err = %v, want ErrNoFDE", pc, err)
		}
	}
}
