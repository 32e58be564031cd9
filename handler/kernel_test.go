package handler

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/unwound-dev/unwound/report"
)

const parkedSrc = `
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
static volatile int ready;
__attribute__((noinline)) static void park(void) { ready++; for (;;) pause(); }
__attribute__((noinline)) static void *worker2(void *a) { park(); return a; }
__attribute__((noinline)) static void *worker(void *a) { return worker2(a); }
__attribute__((noinline)) static void level2(void) { park(); }
__attribute__((noinline)) static void level1(void) { level2(); asm volatile(""); }
int main(void) {
	pthread_t t[2];
	for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, worker, 0);
	while (ready < 2) usleep(1000);
	printf("ready\n"); fflush(stdout);
	level1();
}
`

// TestKernelModeLive feeds RunKernel the way the kernel does: a core on
// stdin while the process is frozen, its pid in the arguments. The core
// comes from gcore of a stopped process, so /proc/<pid>/mem and map_files
// are there to read, as they are during a real dump. The report must match
// the offline unwind of the same core.
func TestKernelModeLive(t *testing.T) {
	bin, core, pid := parkedCore(t)
	cfgPath, qdir := kernelConfig{}.write(t, t.TempDir())
	f, err := os.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf strings.Builder
	if rc := RunKernel(KernelOptions{ConfigPath: cfgPath, Args: kernelArgs(pid, bin, "parked"), Stdin: f, Log: NewLogger(&logBuf)}); rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	t.Log(logBuf.String())
	live := oneReport(t, qdir, logBuf.String())
	if live.Handler.Mode != "live" {
		t.Errorf("mode %q, want live (errors: %v)", live.Handler.Mode, live.Errors)
	}
	if live.Exe != bin || len(live.Threads) != 3 {
		t.Errorf("exe %q, %d threads", live.Exe, len(live.Threads))
	}
	off := offlineReport(t, OfflineOptions{CoreFile: core, Log: NewLogger(&logBuf)})
	for i, th := range live.Threads {
		got, want := pcs(live, th), pcs(off, off.Threads[i])
		if got != want {
			t.Errorf("thread %d: live %s\n offline %s", th.TID, got, want)
		}
		if th.StopReason != "end_of_stack" {
			t.Errorf("thread %d stopped: %s %s", th.TID, th.StopReason, th.StopDetail)
		}
		if len(th.Frames) < 4 {
			t.Errorf("thread %d: only %d frames", th.TID, len(th.Frames))
		}
	}
}

// parkedCore builds the parked program, runs it, stops it and has gcore
// write its core; the process is killed when the test ends.
func parkedCore(t *testing.T) (bin, core string, pid int) {
	for _, tool := range []string{"gcc", "gcore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir := t.TempDir()
	bin = buildC(t, dir, "parked", parkedSrc, "-O2")
	cmd := exec.Command(bin)
	if err := startReady(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return bin, gcore(t, dir, cmd.Process.Pid), cmd.Process.Pid
}

// gcore stops pid and has gdb's gcore write its core into dir.
func gcore(t *testing.T, dir string, pid int) string {
	syscall.Kill(pid, syscall.SIGSTOP)
	core := filepath.Join(dir, "core")
	if out, err := exec.Command("gcore", "-o", core, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Skipf("gcore cannot attach here: %v\n%s", err, out)
	}
	return core + "." + strconv.Itoa(pid)
}

// TestKernelModeCoreFileOnStdin: a core file given on standard input in
// kernel mode, as one tries the handler by hand (`unwound-handler ARGS <
// core`), is read as a file: the whole trace, as offline, where a stream
// reader gave "core stream: invalid argument" (splice takes only pipes)
// and one frame. The real binary, supervised as by default, on a real core
// of a process that is gone.
func TestKernelModeCoreFileOnStdin(t *testing.T) {
	_, core, _ := parkedCore(t)
	f, err := os.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := newHandlerEnv(t, "")
	cmd := exec.Command(handlerBinary(t, ""), append([]string{"--config", h.cfg}, noProcArgs...)...)
	cmd.Env = []string{"UNWOUND_LOG_STDERR=1"}
	cmd.Stdin = f
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r := oneReport(t, h.qdir, string(out))
	if r.Handler.Mode != "file" || r.Partial || len(r.Errors) != 0 {
		t.Errorf("mode %q, partial %v, errors %q\n%s", r.Handler.Mode, r.Partial, r.Errors, out)
	}
	off := offlineReport(t, OfflineOptions{CoreFile: core})
	if len(r.Threads) != 3 || len(off.Threads) != 3 {
		t.Fatalf("%d threads, offline %d", len(r.Threads), len(off.Threads))
	}
	// gcore's cores mark no segment executable, so every PC is withheld
	// (privacy.go): the frames are compared by how they were found.
	for i, th := range r.Threads {
		if got, want := methods(r, th), methods(off, off.Threads[i]); got != want || len(th.Frames) < 4 || th.StopReason != "end_of_stack" {
			t.Errorf("thread %d: %d frames %s, stopped by %s\n offline %s", th.TID, len(th.Frames), got, th.StopReason, want)
		}
	}
}

func methods(r *report.Report, th report.Thread) string {
	var b strings.Builder
	for _, f := range th.Frames {
		b.WriteString(f.Method)
		if f.Module >= 0 {
			b.WriteString("@" + r.Modules[f.Module].Path)
		}
		b.WriteByte(' ')
	}
	return b.String()
}

func pcs(r *report.Report, th report.Thread) string {
	var b strings.Builder
	for _, f := range th.Frames {
		b.WriteString(f.PC.String())
		b.WriteByte(' ')
	}
	return b.String()
}
