package handler

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

func x86Core(t *testing.T, variant, scenario string) (fixture.Binary, string, bool) {
	t.Helper()
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
	if testing.Short() {
		t.Skip("needs fixtures")
	}
	for _, sc := range []string{"nullwrite", "threads", "sigaltstack", "abort"} {
		b, core, kernel := x86Core(t, "O2-dynamic", sc)
		o := OfflineOptions{CoreFile: core, Sysroot: fixture.Sysroot(b.Arch), Config: config.Default(), Log: NewLogger(io.Discard)}
		if !kernel {
			continue // no NT_FILE: libraries are found through memory the stream does not keep
		}
		file, err := Offline(o)
		if err != nil {
			t.Fatal(err)
		}
		// Through a pipe: a regular file on stdin is read as a file.
		f, _ := os.Open(core)
		pr, pw, _ := os.Pipe()
		go func() {
			io.Copy(pw, f)
			pw.Close()
		}()
		o.CoreFile, o.Stdin = "-", pr
		stream, err := Offline(o)
		pr.Close()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
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

// runKernelOn pipes core bytes into RunKernel and returns the queued report.
func runKernelOn(t *testing.T, core []byte, args []string, extraCfg string) *report.Report {
	t.Helper()
	dir := t.TempDir()
	qdir := filepath.Join(dir, "q")
	os.Mkdir(qdir, 0o700)
	cfg := filepath.Join(dir, "u.toml")
	os.WriteFile(cfg, []byte("[queue]\ndir = \""+qdir+"\"\nallow_volatile = true\n[rate_limit]\nstate_dir = \""+filepath.Join(dir, "run")+"\"\n"+extraCfg), 0o644)
	r, w, _ := os.Pipe()
	go func() {
		w.Write(core)
		w.Close()
	}()
	var log bytes.Buffer
	if rc := RunKernel(KernelOptions{ConfigPath: cfg, Args: args, Stdin: r, Log: NewLogger(&log)}); rc != 0 {
		t.Fatalf("exit %d", rc)
	}
	q, _ := queue.Open(qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	es, _ := q.List()
	if len(es) != 1 {
		t.Fatalf("%d reports queued; log:\n%s", len(es), log.String())
	}
	z, _ := q.Read(es[0].Name)
	rep, err := decode.Report(z)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A core cut short, or garbage, still yields a report that says what went
// wrong; the handler exits 0 and never loses the crash.
func TestBrokenCoresStillReport(t *testing.T) {
	if testing.Short() {
		t.Skip("needs fixtures")
	}
	_, core, _ := x86Core(t, "O2-dynamic", "nullwrite")
	full, err := os.ReadFile(core)
	if err != nil {
		t.Fatal(err)
	}
	// A pid that is not the crashed process: /proc gives nothing, as when
	// the kernel has already let go.
	args := []string{"999999999", "999999999", "11", strconv.FormatInt(time.Now().Unix(), 10), "1", "0", "!usr!bin!crash", "crash"}
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
	if testing.Short() {
		t.Skip("needs fixtures")
	}
	_, core, kernel := x86Core(t, "O2-dynamic", "nullwrite")
	if !kernel {
		t.Skip("needs a kernel core, whose NT_FILE places the modules: the host's core_pattern writes no files")
	}
	full, _ := os.ReadFile(core)
	args := []string{"999999999", "999999999", "11", strconv.FormatInt(time.Now().Unix(), 10), "1", "0", "!x", "x"}
	r := runKernelOn(t, full, args, "[handler]\nmax_frames = \"many\"\n")
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
	if testing.Short() {
		t.Skip("needs fixtures")
	}
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
	r, err := Offline(OfflineOptions{CoreFile: core, Sysroot: sys, Config: config.Default(), Log: NewLogger(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := Offline(OfflineOptions{CoreFile: core, Sysroot: sys, Config: config.Default(), Log: NewLogger(io.Discard)}); err != nil {
		t.Fatal(err)
	}
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
	_ = strconv.Itoa
}

// A crash loop is rate-limited per executable: crashes over the limit end
// their dump at once, are counted, and the next report says how many.
func TestCrashLoopIsRateLimited(t *testing.T) {
	if testing.Short() {
		t.Skip("needs fixtures")
	}
	_, core, _ := x86Core(t, "O2-dynamic", "nullwrite")
	full, _ := os.ReadFile(core)
	dir := t.TempDir()
	qdir := filepath.Join(dir, "q")
	os.Mkdir(qdir, 0o700)
	cfg := filepath.Join(dir, "u.toml")
	os.WriteFile(cfg, []byte("[queue]\ndir = \""+qdir+"\"\nallow_volatile = true\n[rate_limit]\ncount = 2\nwindow = \"2s\"\nstate_dir = \""+filepath.Join(dir, "run")+"\"\n"), 0o644)
	// %t is now: a crash time the queue trusts and does not age out.
	args := []string{"999999999", "999999999", "11", strconv.FormatInt(time.Now().Unix(), 10), "1", "0", "!usr!bin!loop", "loop"}
	crash := func() {
		r, w, _ := os.Pipe()
		go func() {
			w.Write(full) // fails early when the handler drops the crash
			w.Close()
		}()
		RunKernel(KernelOptions{ConfigPath: cfg, Args: args, Stdin: r, Log: NewLogger(io.Discard)})
	}
	for i := 0; i < 5; i++ {
		crash()
	}
	q, _ := queue.Open(qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	if es, _ := q.List(); len(es) != 2 {
		t.Fatalf("%d reports from a loop of 5 crashes, limit 2", len(es))
	}
	time.Sleep(3 * time.Second) // the window passes
	crash()
	es, _ := q.List()
	z, _ := q.Read(es[len(es)-1].Name)
	r, err := decode.Report(z)
	if err != nil {
		t.Fatal(err)
	}
	if r.Dropped["rate_limit"]+r.Dropped["rate_limit_executable"] != 3 {
		t.Errorf("dropped %v, want the 3 crashes over the limit", r.Dropped)
	}
}
