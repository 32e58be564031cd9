package handler

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// loopingModule assembles an AArch64 program whose only FDE keeps the
// return address in x30 ("same value") while the CFA rises by 16: every
// step gives the same PC again, with a higher SP (issue 20). It is linked
// at 0x400000, as stackCore's NT_FILE says.
func loopingModule(t *testing.T, dir string) {
	t.Helper()
	cc := "aarch64-linux-gnu-gcc"
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("needs " + cc)
	}
	src := filepath.Join(dir, "loop.s")
	asm := `	.text
	.globl _start
_start:
	.cfi_startproc
	.cfi_def_cfa sp, 16
	.cfi_same_value x30
	.rept 2048
	nop
	.endr
	.cfi_endproc
`
	if err := os.WriteFile(src, []byte(asm), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "usr", "bin", "victim")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Run(t, cc, "-nostdlib", "-static", "-Wl,-Ttext-segment=0x400000", "-Wl,--build-id", "-o", exe, src)
}

// A CFI rule that loops with a rising SP, in a two-thread core: each
// thread's walk ends quickly, and the second thread still gets its frames.
// The rule keeps the return address in x30, which the caller's own call
// clobbered: the walk ends at the first caller, or at the first repeat.
func TestLoopingCFIRule(t *testing.T) {
	dir := t.TempDir()
	loopingModule(t, dir)
	core := stackCore()
	core.threads[0].pc, core.threads[0].lr = 0x400200, 0x400400
	core.threads[1].pc, core.threads[1].lr = 0x400300, 0x400500
	path := core.file(t, dir)
	cfg := config.Default()
	cfg.Handler.Deadline = config.Duration(2 * time.Second)
	start := time.Now()
	r := offlineReport(t, OfflineOptions{CoreFile: path, Sysroot: dir, Config: cfg})
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v", d)
	}
	if len(r.Threads) != 2 {
		t.Fatalf("%d threads", len(r.Threads))
	}
	for _, th := range r.Threads {
		if (th.StopReason != "loop" && th.StopReason != "no_unwind_info") || len(th.Frames) < 2 || len(th.Frames) > 8 {
			t.Errorf("thread %d: %d frames, stop %s (%s): want a few frames and a loop or no unwind info", th.TID, len(th.Frames), th.StopReason, th.StopDetail)
		}
		for _, f := range th.Frames {
			if f.Method == "" || f.Trust == "" {
				t.Errorf("thread %d: frame %v without method or trust", th.TID, f)
			}
		}
	}
}
