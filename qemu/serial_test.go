package qemu

// The serial end-to-end test of the demo board is TestDemo (qemu/cmd/demo).

import (
	"context"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestPointerAuthentication runs a board whose CPU signs return addresses
// (-cpu max: FEAT_PAuth) with a program built -mbranch-protection=standard:
// the handler must strip the signatures (DW_CFA_AARCH64_negate_ra_state,
// NT_ARM_PAC_MASK) or the trace breaks after the first signed frame.
func TestPointerAuthentication(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	b := &Board{Arch: "aarch64", CPU: "max", Scenario: "abort", Dir: t.TempDir(), Progress: t.Logf}
	res, err := b.Run(context.Background())
	if err != nil {
		if res != nil {
			t.Log(res.Console)
		}
		t.Fatal(err)
	}
	out := testutil.Run(t, res.Unwound, res.SymbolizeArgs(res.Reports[0])...)
	for _, want := range []string{"abort at abort.c:", "in ab2 at crash.c:", "in ab1 at crash.c:", "in main at crash.c:", "in _start"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}
