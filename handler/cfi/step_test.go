package cfi

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

// TestStep unwinds a synthetic frame: CFA = rsp+16, RA at cfa-8, rbp at
// cfa-16, plus one register for every other rule kind.
func TestStep(t *testing.T) {
	le := binary.LittleEndian
	const sp, cfa = 0x7ff0, 0x8000
	mem := fakeMem{}
	mem.put64(le, cfa-8, 0x401234)  // return address
	mem.put64(le, cfa-16, 0x8888)   // saved rbp
	mem.put64(le, 0x9000, 0xabcdef) // what an expression rule points at
	var cur regs.Set
	cur.Set(rRSP, sp)
	cur.Set(rRBP, 0x1111)
	cur.Set(rRBX, 0x3333)
	cur.Set(rR12, 0x1212)
	cur.Set(13, 0x1313)
	cur.Set(14, 0x1414)
	cur.Set(rRA, 0x400000) // callee's rip

	row := &Row{CFA: cfaRule(rRSP, 16), RA: rRA}
	row.Regs[rRA] = regOff(-8)
	row.Regs[rRBP] = regOff(-16)
	row.Regs[rRBX] = Rule{Kind: RuleRegister, Reg: rR12}
	row.Regs[rR12] = Rule{Kind: RuleValOffset, Offset: 32}
	row.Regs[13] = Rule{Kind: RuleExpression, Expr: cat(0x0c, le.AppendUint32(nil, 0x9000))} // *(0x9000)
	row.Regs[14] = Rule{Kind: RuleValExpression, Expr: cat(0x23, uleb(4))}                   // CFA+4
	row.Regs[15] = Rule{Kind: RuleSameValue}                                                 // unknown stays unknown
	row.Regs[2] = Rule{Kind: RuleUndefined}                                                  // cleared
	caller, gotCFA, ra, err := row.Step(&cur, mem, rRSP, archX86)
	if err != nil {
		t.Fatal(err)
	}
	if gotCFA != cfa || ra != 0x401234 {
		t.Fatalf("cfa %#x ra %#x", gotCFA, ra)
	}
	want := map[int]uint64{
		rRSP: cfa,      // sp becomes the CFA
		rRA:  0x401234, // loaded from cfa-8
		rRBP: 0x8888,   // loaded from cfa-16
		rRBX: 0x1212,   // was in r12 (the callee's)
		rR12: cfa + 32, // val_offset
		13:   0xabcdef, // expression: loaded
		14:   cfa + 4,  // val_expression: the CFA is pushed first
	}
	for n, v := range want {
		if got, ok := caller.Get(n); !ok || got != v {
			t.Errorf("caller reg %d = %#x (%v), want %#x", n, got, ok, v)
		}
	}
	if caller.Has(2) || caller.Has(15) {
		t.Errorf("caller %v: r2 should be cleared and r15 unknown", caller.String())
	}
	// cur is not modified.
	if v, _ := cur.Get(rRSP); v != sp {
		t.Error("Step modified the callee's registers")
	}
}

func TestStepErrors(t *testing.T) {
	le := binary.LittleEndian
	var cur regs.Set
	cur.Set(rRSP, 0x7ff0)
	mem := fakeMem{}
	tests := []struct {
		name string
		row  func(*Row)
		mem  fakeMem
		arch Arch
		is   error
		err  string
	}{
		{name: "undefined RA is the outermost frame", row: func(r *Row) { r.Regs[rRA] = Rule{Kind: RuleUndefined} }, is: ErrUndefinedRA},
		{name: "no CFA rule", row: func(r *Row) { r.CFA = Rule{} }, err: "no CFA"},
		{name: "CFA register unknown", row: func(r *Row) { r.CFA.Reg = rRBP }, err: "CFA register"},
		{name: "CFA register out of range", row: func(r *Row) { r.CFA.Reg = 1 << 40 }, err: "CFA register"},
		{name: "saved RA unreadable", row: func(*Row) {}, err: "reading saved register"},
		{name: "RA column with no value", row: func(r *Row) { r.Regs[rRA] = Rule{} }, mem: mem, err: "return address register"},
		{name: "CFA expression error", row: func(r *Row) { r.CFA = Rule{Kind: RuleCFAExpression, Expr: []byte{0x12}} }, err: "underflow"},
		{name: "register expression error", row: func(r *Row) { r.Regs[3] = Rule{Kind: RuleExpression, Expr: []byte{0xe0}} }, err: "unsupported"},
		{name: "no memory", row: func(*Row) {}, mem: nil, err: "memory"},
		{name: "bad pointer size", row: func(*Row) {}, arch: Arch{PtrSize: 3, Order: le}, err: "pointer size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			row := &Row{CFA: cfaRule(rRSP, 16), RA: rRA}
			row.Regs[rRA] = regOff(-8)
			tc.row(row)
			a := tc.arch
			if a.PtrSize == 0 {
				a = archX86
			}
			var m fakeMem
			if tc.mem != nil || !strings.HasPrefix(tc.name, "no memory") {
				m = fakeMem{}
			}
			var err error
			if m == nil {
				_, _, _, err = row.Step(&cur, nil, rRSP, a)
			} else {
				_, _, _, err = row.Step(&cur, m, rRSP, a)
			}
			if tc.is != nil {
				if !errors.Is(err, tc.is) {
					t.Fatalf("err = %v, want %v", err, tc.is)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

// TestStep32 unwinds a 32-bit big-endian frame: the CFA wraps at 32 bits
// and saved registers are 4 bytes.
func TestStep32(t *testing.T) {
	be := binary.BigEndian
	a := Arch{PtrSize: 4, Order: be}
	mem := fakeMem{}
	mem.put32(be, 0x8, 0xcafe) // RA at cfa-8 where the CFA wrapped to 0x10
	var cur regs.Set
	cur.Set(1, 0xfffffff0)
	row := &Row{CFA: cfaRule(1, 0x20), RA: 65}
	row.Regs[65] = regOff(-8)
	caller, cfa, ra, err := row.Step(&cur, mem, 1, a)
	if err != nil {
		t.Fatal(err)
	}
	if cfa != 0x10 || ra != 0xcafe {
		t.Fatalf("cfa %#x ra %#x", cfa, ra)
	}
	if v, _ := caller.Get(1); v != 0x10 {
		t.Errorf("caller sp %#x", v)
	}
}

// TestStepFromTable runs the whole path: assemble an FDE, look up a PC,
// compute the row and step.
func TestStepFromTable(t *testing.T) {
	le := binary.LittleEndian
	// push rbp; mov rbp, rsp: CFA rsp+16 and rbp at cfa-16 after 1 byte,
	// then CFA rbp+16 after 4.
	insns := cat(0x41, 0x0e, uleb(16), 0x80|rRBP, uleb(2), 0x43, 0x0d, uleb(rRBP))
	data := buildEH(x86CIE(), insns)
	tab, _ := NewEHFrame(data, testEHAddr, nil, 0, archX86)
	const pc = 0x1010
	f, err := tab.Lookup(pc)
	if err != nil {
		t.Fatal(err)
	}
	row, err := tab.Row(f, pc)
	if err != nil {
		t.Fatal(err)
	}
	mem := fakeMem{}
	mem.put64(le, 0x7008, 0x5555) // RA at cfa-8 (cfa = rbp+16 = 0x7010)
	mem.put64(le, 0x7000, 0x7100) // saved rbp
	var cur regs.Set
	cur.Set(rRSP, 0x6f00)
	cur.Set(rRBP, 0x7000)
	caller, cfa, ra, err := row.Step(&cur, mem, rRSP, archX86)
	if err != nil {
		t.Fatal(err)
	}
	if cfa != 0x7010 || ra != 0x5555 {
		t.Fatalf("cfa %#x ra %#x", cfa, ra)
	}
	if v, _ := caller.Get(rRBP); v != 0x7100 {
		t.Errorf("caller rbp %#x", v)
	}
	if v, _ := caller.Get(rRSP); v != 0x7010 {
		t.Errorf("caller rsp %#x", v)
	}
}
