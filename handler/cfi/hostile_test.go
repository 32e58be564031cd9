package cfi

import (
	"bytes"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/handler/regs"
)

// Crafted CFI programs end with an error, quickly, without allocating what
// they claim: a huge run of DW_CFA_advance_loc, remember_state without end,
// an expression that loops, an FDE whose CIE pointer is itself.
func TestCraftedPrograms(t *testing.T) {
	pc := uint64(testFDEStart + testFDELen - 1)
	for _, tc := range []struct {
		name  string
		insns []byte
	}{
		{"advance_loc 0 a million times", bytes.Repeat([]byte{0x40}, 1_000_000)},
		{"advance_loc1 0 half a million times", bytes.Repeat([]byte{0x02, 0x00}, 500_000)},
		{"remember_state without end", bytes.Repeat([]byte{0x0a}, 100_000)},
		{"restore_state without remember", bytes.Repeat([]byte{0x0b}, 10)},
		{"def_cfa_expression that loops", cat(0x0f, uleb(3), 0x2f, byte(0xfd), byte(0xff))}, // DW_OP_skip -3
		{"expression longer than the FDE", cat(0x0f, uleb(1<<40))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := buildEH(x86CIE(), tc.insns)
			start := time.Now()
			var row *Row
			var err error
			n := testing.AllocsPerRun(1, func() { row, err = rowAt(t, data, archX86, pc) })
			if err == nil && row != nil && row.CFA.Kind == RuleCFAExpression {
				// The expression only fails when it is evaluated.
				var rs regs.Set
				rs.Set(rRSP, 0x1000)
				_, _, _, err = row.Step(&rs, fakeMem{}, rRSP, archX86)
			}
			if err == nil {
				t.Errorf("no error")
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("took %v", d)
			}
			t.Logf("%v (%.0f allocations)", err, n)
		})
	}
}
