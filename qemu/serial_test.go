package qemu

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/report/decode"
)

// TestSerialDrain is the whole chain on a real kernel: crash on the board,
// handler through core_pattern, unwound-uploader --once over the board's
// serial line, unwound receive on a host pty, and a report that decodes,
// says which program crashed, and symbolizes to the crashing function.
// The board's queue must be empty afterwards (entries removed only once
// acknowledged).
func TestSerialDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	b := &Board{Arch: "aarch64", Scenario: "threads", Dir: t.TempDir(), Progress: t.Logf}
	res, err := b.Run(context.Background())
	if err != nil {
		if res != nil {
			t.Log(res.Console)
		}
		t.Fatal(err)
	}
	z, err := os.ReadFile(res.Reports[0])
	if err != nil {
		t.Fatal(err)
	}
	r, err := decode.Report(z)
	if err != nil {
		t.Fatal(err)
	}
	if r.Exe != "/usr/bin/crash" || len(r.Threads) != 4 || r.Handler.Mode != "live" {
		t.Errorf("exe %q, %d threads, mode %s", r.Exe, len(r.Threads), r.Handler.Mode)
	}
	out, err := exec.Command(res.Unwound, "symbolize", "--sysroot", res.HostRoot, res.Reports[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("symbolize: %v\n%s", err, out)
	}
	for _, want := range []string{"in null_write at crash.c:", "in nw3 at crash.c:", "in park at crash.c:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("symbolized trace lacks %q:\n%s", want, out)
		}
	}
}

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
	out, err := exec.Command(res.Unwound, "symbolize", "--sysroot", res.HostRoot, res.Reports[0]).CombinedOutput()
	if err != nil {
		t.Fatalf("symbolize: %v\n%s", err, out)
	}
	for _, want := range []string{"in abort", "in ab2 at crash.c:", "in ab1 at crash.c:", "in main at crash.c:", "in _start"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}
