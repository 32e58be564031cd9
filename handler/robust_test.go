package handler

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// x86Core is a core of the crash fixture built as variant and crashed in
// scenario on this host (AArch64's on an AArch64 host), and whether the
// kernel wrote it. Not in -short: it builds the fixtures.
func x86Core(t *testing.T, variant, scenario string) (fixture.Binary, string, bool) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs fixtures")
	}
	arch := "x86_64"
	if !fixture.Native(arch) {
		arch = "aarch64"
	}
	b := fixture.Binary{Arch: arch, Variant: variant, Prog: "crash", Dir: fixture.Build(t, arch)}
	core, kernel := fixture.Core(t, b, scenario)
	return b, core, kernel
}

// The core read as a stream (stdin, one pass, only stack windows kept) must
// give the trace the whole core file gives.
func TestStreamModeMatchesFileMode(t *testing.T) {
	for _, sc := range []string{"nullwrite", "threads", "sigaltstack", "abort"} {
		b, core, kernel := x86Core(t, "O2-dynamic", sc)
		o := OfflineOptions{CoreFile: core, Sysroot: fixture.Sysroot(b.Arch)}
		if !kernel {
			continue // no NT_FILE: libraries are found through memory the stream does not keep
		}
		file := offlineReport(t, o)
		// Through a pipe: a regular file on stdin is read as a file.
		f, _ := os.Open(core)
		pr, pw, _ := os.Pipe()
		go func() {
			io.Copy(pw, f)
			pw.Close()
		}()
		o.CoreFile, o.Stdin = "-", pr
		stream := offlineReport(t, o)
		pr.Close()
		f.Close()
		if stream.Handler.Mode != "stream" || len(stream.Errors) > 0 {
			t.Errorf("%s: mode %s, errors %v", sc, stream.Handler.Mode, stream.Errors)
		}
		for i := range file.Threads {
			if a, b := pcs(file, file.Threads[i]), pcs(stream, stream.Threads[i]); a != b {
				t.Errorf("%s thread %d:\nfile   %s\nstream %s", sc, file.Threads[i].TID, a, b)
			}
		}
	}
}

// runKernelOn pipes core bytes into RunKernel and returns the queued
// report; handler is more lines of the config's [handler] table.
func runKernelOn(t *testing.T, core []byte, args []string, handler string) *report.Report {
	t.Helper()
	cfg, qdir := kernelConfig{handler: handler}.write(t, t.TempDir())
	var log bytes.Buffer
	if rc := RunKernel(KernelOptions{ConfigPath: cfg, Args: args, Stdin: pipeBytes(core), Log: NewLogger(&log)}); rc != 0 {
		t.Fatalf("exit %d", rc)
	}
	return oneReport(t, qdir, log.String())
}

// pipeBytes is the read end of a pipe that b is written into, then closed
// (or that fails early, once the reader lets go).
func pipeBytes(b []byte) *os.File {
	r, w, _ := os.Pipe()
	go func() {
		w.Write(b)
		w.Close()
	}()
	return r
}

// A core cut short, or garbage, still yields a report that says what went
// wrong; the handler exits 0 and never loses the crash.
func TestBrokenCoresStillReport(t *testing.T) {
	_, core, _ := x86Core(t, "O2-dynamic", "nullwrite")
	full, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	// A pid that is not the crashed process: /proc gives nothing, as when
	// the kernel has already let go.
	args := kernelArgs(999999999, "/usr/bin/crash", "crash")
	for _, tc := range []struct {
		name  string
		bytes []byte
		want  string
	}{
		{"empty", nil, "truncated"},
		{"garbage", bytes.Repeat([]byte("unwound!"), 1000), "ELF"},
		{"cut in the notes", full[:1500], "truncated"},
		{"cut in the segments", full[:len(full)/3], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runKernelOn(t, tc.bytes, args, "")
			if tc.want != "" {
				if !r.Partial || !strings.Contains(strings.Join(r.Errors, "; "), tc.want) {
					t.Errorf("partial %v, errors %q, want one mentioning %q", r.Partial, r.Errors, tc.want)
				}
			}
			if r.PID != 999999999 || r.Signal.Name != "SIGSEGV" {
				t.Errorf("kernel arguments lost: pid %d signal %q", r.PID, r.Signal.Name)
			}
		})
	}
}

// A broken config does not lose the crash: defaults are used and the
// report says so.
func TestBrokenConfigStillReports(t *testing.T) {
	_, core, kernel := x86Core(t, "O2-dynamic", "nullwrite")
	if !kernel {
		t.Skip("needs a kernel core, whose NT_FILE places the modules: the host's core_pattern writes no files")
	}
	full, _ := os.ReadFile(core)
	r := runKernelOn(t, full, kernelArgs(999999999, "/x", "x"), "max_frames = \"many\"")
	if !strings.Contains(strings.Join(r.Errors, "; "), "using defaults for the keys in error") {
		t.Errorf("errors %q", r.Errors)
	}
	if len(r.Threads) == 0 || len(r.Threads[0].Frames) < 4 {
		t.Errorf("no trace with the default config: %+v", r.Threads)
	}
}

// Modules that cannot be used (missing, garbage tables, truncated) are
// named in the report with the reason; the rest of the trace stands.
func TestBadModulesAreReported(t *testing.T) {
	b, core, kernel := x86Core(t, "O2-dynamic", "nullwrite")
	if !kernel {
		t.Skip("needs a kernel core (NT_FILE)")
	}
	sys := t.TempDir()
	// The sysroot holds a garbage program and no libc.
	exe := b.Stripped()
	bad, _ := os.ReadFile(exe)
	garbled := append([]byte(nil), bad...)
	for i := 0x200; i < len(garbled)-64; i += 7 {
		garbled[i] ^= 0x5a // keeps the ELF header, ruins the rest
	}
	os.MkdirAll(filepath.Join(sys, filepath.Dir(exe)), 0o755)
	os.WriteFile(filepath.Join(sys, exe), garbled, 0o755)
	r := offlineReport(t, OfflineOptions{CoreFile: core, Sysroot: sys})
	ct := r.Crashed()
	if ct == nil || len(ct.Frames) == 0 || ct.StopReason == "" {
		t.Fatalf("no crashed thread: %+v", r.Threads)
	}
	var errs []string
	for _, m := range r.Modules {
		if m.Error != "" {
			errs = append(errs, m.Path+": "+m.Error)
		}
	}
	if len(errs) == 0 {
		t.Errorf("no module error reported; modules %+v", r.Modules)
	}
	t.Logf("frames %d, stop %s (%s), module errors %q", len(ct.Frames), ct.StopReason, ct.StopDetail, errs)

	// Truncated while mapped: the file is cut to its first 4 KiB.
	os.WriteFile(filepath.Join(sys, exe), bad[:4096], 0o755)
	offlineReport(t, OfflineOptions{CoreFile: core, Sysroot: sys})
}

// The installed binary prints the core_pattern line with its own path.
func TestCorePatternFlag(t *testing.T) {
	bin := handlerBinary(t, "")
	without := "|" + bin + " --config /etc/unwound/unwound.toml " + sysctl.PatternSpecifiers + "\n"
	with := "|" + bin + " --config /etc/unwound/unwound.toml " + sysctl.PidfdArg + " " + sysctl.PatternSpecifiers + "\n"
	auto := without
	if sysctl.PidfdSupported(sysctl.KernelRelease()) {
		auto = with
	}
	for _, tc := range []struct{ mode, want string }{{"", auto}, {"auto", auto}, {"on", with}, {"off", without}} {
		args := []string{"--config", "/etc/unwound/unwound.toml", "--core-pattern"}
		if tc.mode != "" {
			args = append([]string{"--pidfd", tc.mode}, args...)
		}
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != tc.want {
			t.Errorf("--pidfd %q: got %q, want %q", tc.mode, out, tc.want)
		}
	}
	if err := exec.Command(bin, "--pidfd", "maybe", "--core-pattern").Run(); err == nil {
		t.Errorf("--pidfd maybe --core-pattern succeeded")
	}
}

// A crash loop is rate-limited per executable: crashes over the limit end
// their dump at once, are counted, and the next report says how many.
func TestCrashLoopIsRateLimited(t *testing.T) {
	_, core, _ := x86Core(t, "O2-dynamic", "nullwrite")
	full, _ := os.ReadFile(core)
	cfg, qdir := kernelConfig{rateLimit: "count = 2\nwindow = \"2s\""}.write(t, t.TempDir())
	// %t is now: a crash time the queue trusts and does not age out.
	args := kernelArgs(999999999, "/usr/bin/loop", "loop")
	crash := func() {
		// The write fails early when the handler drops the crash.
		RunKernel(KernelOptions{ConfigPath: cfg, Args: args, Stdin: pipeBytes(full), Log: NewLogger(io.Discard)})
	}
	for i := 0; i < 5; i++ {
		crash()
	}
	if rs := queuedReports(t, qdir); len(rs) != 2 {
		t.Fatalf("%d reports from a loop of 5 crashes, limit 2", len(rs))
	}
	time.Sleep(3 * time.Second) // the window passes
	crash()
	rs := queuedReports(t, qdir)
	if r := rs[len(rs)-1]; r.Dropped["rate_limit"]+r.Dropped["rate_limit_executable"] != 3 {
		t.Errorf("dropped %v, want the 3 crashes over the limit", r.Dropped)
	}
}
