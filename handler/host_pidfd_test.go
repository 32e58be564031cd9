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
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/sysctl"
)

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
	if os.Getenv("UNWOUND_TEST_HOST") != "1" {
		t.Skip("opt-in: make test-host (root; installs the handler as core_pattern and restores it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if rel := sysctl.KernelRelease(); !sysctl.PidfdSupported(rel) {
		t.Skipf("kernel %s passes no pidfd (6.16 or later does)", rel)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	// Short paths: with --pidfd=%F the line must still fit the kernel's
	// 127 characters.
	dir, err := os.MkdirTemp("", "uw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin, cfg, qdir, _ := hostHandler(t, dir)
	prog := filepath.Join(dir, "crasher")
	os.WriteFile(prog+".c", []byte(crashSrc), 0o644)
	if out, err := exec.Command("gcc", "-O2", "-pthread", "-o", prog, prog+".c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
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
	q, err := queue.Open(qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	if err != nil {
		t.Fatal(err)
	}
	crash := func(t *testing.T, wantLog string) {
		cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+prog)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		pid := cmd.Process.Pid
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
		for _, c := range []string{"core.*"} {
			m, _ := filepath.Glob(filepath.Join(dir, "cores", c))
			for _, f := range m {
				os.Remove(f)
			}
		}
	}
	t.Run("pidfd", func(t *testing.T) { crash(t, "live mode (pidfd)") })
	t.Run("no-fd-3", func(t *testing.T) {
		// Not %F: the kernel installs no fd 3.
		stray := strings.Replace(line, sysctl.PidfdArg, "--pidfd=3", 1)
		if err := os.WriteFile(corePatternFile, []byte(stray), 0o644); err != nil {
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
