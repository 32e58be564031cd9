package handler

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// Offline on a synthetic core, in the test process: from a file and from
// stdin (the kernel's stream path), the same report of every thread.
func TestOfflineSyntheticCore(t *testing.T) {
	core := stackCore()
	b, path := core.bytes(), core.file(t, t.TempDir())
	for _, tc := range []struct {
		mode string
		o    OfflineOptions
	}{
		{"file", OfflineOptions{CoreFile: path}},
		{"stream", OfflineOptions{CoreFile: "-", Stdin: bytes.NewReader(b)}},
		// --core-file - < core: a regular file on stdin is read as one.
		{"file", OfflineOptions{CoreFile: "-", Stdin: openFile(t, path)}},
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

func openFile(t *testing.T, path string) *os.File {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// A qemu-user core has no NT_FILE: the libraries come from the dynamic
// linker's link_map. musl's loader (its libc) names itself by the
// program's PT_INTERP string, in a read-only page of the program that
// such cores leave out; it must still be placed, from the program's file,
// or every frame in libc is in no module.
func TestOfflineMuslLoaderFromInterp(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-built fixtures: not in -short")
	}
	for arch, loader := range map[string]string{"aarch64": "/lib/ld-musl-aarch64.so.1", "arm": "/lib/ld-musl-armhf.so.1"} {
		t.Run(arch, func(t *testing.T) {
			dir := fixture.Build(t, arch)
			b := fixture.Binary{Arch: arch, Variant: "gcc-bfd-default-dynamic-musl", Prog: "crash", Dir: dir}
			if _, err := os.Stat(b.Stripped()); err != nil {
				t.Skipf("not built here: %v", err)
			}
			core, kernel := fixture.Core(t, b, "raise")
			if kernel {
				t.Skip("a kernel core has NT_FILE")
			}
			got := offlineReport(t, OfflineOptions{CoreFile: core, Exe: b.Stripped(), Sysroot: b.Sysroot()})
			th := got.Crashed()
			if th == nil || len(th.Frames) == 0 {
				t.Fatalf("no crashed thread: %+v", got.Errors)
			}
			// raise is in libc: frame 0 must be in the loader's module.
			if m := th.Frames[0].Module; m < 0 || got.Modules[m].Path != loader {
				var paths []string
				for _, m := range got.Modules {
					paths = append(paths, m.Path)
				}
				t.Errorf("frame 0 in module %d, want %s among %q (errors %q)", m, loader, paths, got.Errors)
			}
		})
	}
}
