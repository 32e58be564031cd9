package handler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// installCorePattern points the host's core_pattern at the handler until
// the test ends. The restore also runs on SIGINT/SIGTERM, so an
// interrupted test leaves the host as it was.
func installCorePattern(t testing.TB, line string) {
	t.Helper()
	if err := testutil.SwapCorePattern(t)(line); err != nil {
		t.Fatal(err)
	}
}

// hostHandler is unwound-handler and a config for it in dir; with save,
// it keeps each whole core in dir/cores (saveDir).
// The handler is copied into dir: the line with the temporary paths must
// fit the kernel's 127 characters (with --pidfd=%F too), so dir should be
// short (testutil.HostDir).
func hostHandler(t testing.TB, dir string, save bool) (bin, cfg, qdir, saveDir string) {
	b, err := os.ReadFile(handlerBinary(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "unwound-handler")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	k := kernelConfig{handler: "freeze_budget = \"4s\"", queue: "max_entries = 1000\nmax_bytes_kib = 65536", rateLimit: "count = 0\nmax_concurrent = 64"}
	if save {
		saveDir = filepath.Join(dir, "cores")
		os.Mkdir(saveDir, 0o700)
		k.handler += fmt.Sprintf("\nsave_core_dir = %q", saveDir)
	}
	cfg, qdir = k.write(t, dir)
	return
}

// TestHost is the real kernel path on the host: the kernel pipes each
// x86_64 fixture's core into the installed handler, which reads /proc
// while the process is frozen and queues a report; gdb then walks the
// full core the handler saved (save_core_dir) with the unstripped program.
// Opt-in (make test-host): it replaces the host's core_pattern for the
// duration and restores it on every exit path.
func TestHost(t *testing.T) {
	dir := testutil.HostDir(t, "installs the handler as core_pattern")
	if !fixture.Native("x86_64") {
		t.Skip("needs an x86_64 host")
	}
	fx := fixture.Build(t, "x86_64")
	bin, cfg, qdir, saveDir := hostHandler(t, dir, true)
	line, err := exec.Command(bin, "--config", cfg, "--core-pattern").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	t.Logf("core_pattern: %s", line)
	installCorePattern(t, strings.TrimSpace(string(line)))
	q := openQueue(t, qdir)
	for _, variant := range fixture.Variants {
		for _, sc := range fixture.ScenariosWithThrow() {
			b := fixture.Binary{Arch: "x86_64", Variant: variant, Prog: fixture.Prog(sc), Dir: fx}
			t.Run(variant+"/"+sc, func(t *testing.T) {
				pid, _, _ := crashProg(t, b.Stripped()+" "+sc)
				r := waitReport(t, q, pid)
				if r.Handler.Mode != "live" {
					t.Errorf("mode %s, want live; errors %v", r.Handler.Mode, r.Errors)
				}
				core, err := filepath.Glob(filepath.Join(saveDir, fmt.Sprintf("core.%d.*", r.PID)))
				if err != nil || len(core) != 1 {
					t.Fatalf("saved core for pid %d: %v %v", r.PID, core, err)
				}
				want := fixture.Oracle(t, b, core[0])
				fixture.CompareReport(t, r, want)
				t.Logf("pid %d: frozen %d ms, handler %d ms", r.PID, r.Handler.FrozenMS, r.Handler.DurationMS)
				os.Remove(core[0])
			})
		}
	}
}

// waitReport waits for the report of pid: other processes on the host may
// crash meanwhile, and their reports land in the same queue.
func waitReport(t testing.TB, q *queue.Queue, pid int) *report.Report {
	t.Helper()
	var r *report.Report
	if pollReports(t, q, 20*time.Second, 20*time.Millisecond, func(got *report.Report) bool { r = got; return r.PID == pid }) {
		return r
	}
	out, _ := exec.Command("sh", "-c", "dmesg | grep unwound | tail -5").Output()
	t.Fatalf("no report for pid %d within 20 s; kernel log:\n%s", pid, out)
	return nil
}

// crashSrc parks a thread, then faults in main.
const crashSrc = `
#include <pthread.h>
#include <unistd.h>
static volatile int ready;
__attribute__((noinline)) static void park(void) { ready++; for (;;) pause(); }
__attribute__((noinline)) static void *worker(void *a) { park(); return a; }
__attribute__((noinline)) static void fault(volatile int *p) { *p = 1; }
int main(void) {
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	while (!ready) usleep(1000);
	fault(0);
	return 0;
}
`

// TestHostPidfd is %F on the host's own kernel (6.16 or later): the
// handler is installed as core_pattern with --pidfd=%F, a real program
// crashes, and the report is live, with the pidfd checked by the
// supervised child (its kernel log line says "(pidfd)"). Then a line that
// names an fd the kernel does not pass (--pidfd=3 without %F): the handler
// logs that it ignores it and reports as before. Opt-in (make test-host):
// it replaces the host's core_pattern and restores it on every exit path.
func TestHostPidfd(t *testing.T) {
	// Short paths: with --pidfd=%F the line must still fit the kernel's
	// 127 characters.
	dir := testutil.HostDir(t, "installs the handler as core_pattern")
	if rel := sysctl.KernelRelease(); !sysctl.PidfdSupported(rel) {
		t.Skipf("kernel %s passes no pidfd (6.16 or later does)", rel)
	}
	bin, cfg, qdir, _ := hostHandler(t, dir, true)
	prog := buildC(t, dir, "crasher", crashSrc, "-O2")
	out, err := exec.Command(bin, "--config", cfg, "--pidfd", "on", "--core-pattern").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	line := strings.TrimSpace(string(out))
	if !strings.Contains(line, sysctl.PidfdArg) {
		t.Fatalf("line %q has no %s", line, sysctl.PidfdArg)
	}
	auto, _ := exec.Command(bin, "--config", cfg, "--core-pattern").Output()
	if strings.TrimSpace(string(auto)) != line {
		t.Errorf("--core-pattern on this kernel (auto) is %q, not %q", auto, line)
	}
	installCorePattern(t, line)
	q := openQueue(t, qdir)
	crash := func(t *testing.T, wantLog string) {
		pid, _, _ := crashProg(t, prog)
		r := waitReport(t, q, pid)
		if r.Handler.Mode != "live" || len(r.Errors) != 0 {
			t.Errorf("mode %s, errors %q; want live, none", r.Handler.Mode, r.Errors)
		}
		if r.Exe != prog || len(r.Threads) != 2 {
			t.Errorf("exe %q, %d threads", r.Exe, len(r.Threads))
		}
		if ct := r.Crashed(); ct == nil || len(ct.Frames) < 3 {
			t.Errorf("crashed thread: %+v", ct)
		}
		kmsg := waitKmsg(t, pid, wantLog)
		t.Logf("pid %d: frozen %d ms; kernel log:\n%s", pid, r.Handler.FrozenMS, kmsg)
		m, _ := filepath.Glob(filepath.Join(dir, "cores", "core.*"))
		for _, f := range m {
			os.Remove(f)
		}
	}
	t.Run("pidfd", func(t *testing.T) { crash(t, "live mode (pidfd)") })
	t.Run("no-fd-3", func(t *testing.T) {
		// Not %F: the kernel installs no fd 3.
		stray := strings.Replace(line, sysctl.PidfdArg, "--pidfd=3", 1)
		if err := os.WriteFile(testutil.CorePatternFile, []byte(stray), 0o644); err != nil {
			t.Fatal(err)
		}
		crash(t, "--pidfd 3 ignored")
	})
}

// waitKmsg waits for a kernel log line of the handler about pid holding
// want, and returns the handler's lines about pid.
func waitKmsg(t *testing.T, pid int, want string) string {
	t.Helper()
	var lines []string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("dmesg").Output()
		if err != nil {
			t.Skipf("dmesg: %v", err)
		}
		lines = lines[:0]
		found := false
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "unwound") && strings.Contains(l, fmt.Sprintf("pid %d", pid)) {
				lines = append(lines, l)
				found = found || strings.Contains(l, want)
			}
		}
		if found {
			return strings.Join(lines, "\n")
		}
	}
	t.Errorf("no kernel log line about pid %d with %q; lines:\n%s", pid, want, strings.Join(lines, "\n"))
	return ""
}
