package handler

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/report"
)

// Offline on a synthetic core, in the test process: from a file and from
// stdin (the kernel's stream path), the same report of every thread.
func TestOfflineSyntheticCore(t *testing.T) {
	core := stackCore()
	b := core.bytes()
	path := filepath.Join(t.TempDir(), "core")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode string
		o    OfflineOptions
	}{
		{"file", OfflineOptions{CoreFile: path}},
		{"stream", OfflineOptions{CoreFile: "-", Stdin: bytes.NewReader(b)}},
	} {
		tc.o.Config, tc.o.Log, tc.o.Sysroot = config.Default(), NewLogger(io.Discard), t.TempDir()
		r, err := Offline(tc.o)
		if err != nil {
			t.Fatalf("%s: %v", tc.mode, err)
		}
		if r.Handler.Mode != tc.mode || r.Arch != "aarch64" || r.PID != core.pid || r.Comm != "victim" || r.Exe != "" {
			t.Errorf("%s: mode %q arch %q pid %d comm %q exe %q", tc.mode, r.Handler.Mode, r.Arch, r.PID, r.Comm, r.Exe)
		}
		if r.Signal.Name != "SIGSEGV" || r.Signal.FaultAddr == nil || *r.Signal.FaultAddr != report.Hex(core.addr) {
			t.Errorf("%s: signal %+v", tc.mode, r.Signal)
		}
		if len(r.Threads) != len(core.threads) {
			t.Fatalf("%s: %d threads, want %d", tc.mode, len(r.Threads), len(core.threads))
		}
		for i, th := range r.Threads {
			want := core.threads[i]
			if th.TID != want.tid || th.Crashed != (i == 0) || len(th.Frames) == 0 ||
				th.Frames[0].PC != report.Hex(want.pc) || th.Frames[0].Method != "context" || th.StopReason == "" {
				t.Errorf("%s: thread %d: %+v", tc.mode, i, th)
			}
		}
	}
}
