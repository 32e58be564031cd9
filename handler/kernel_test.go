package handler

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
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
	dir, bin, core, pid := parkedCore(t)
	qdir := filepath.Join(dir, "queue")
	os.Mkdir(qdir, 0o700)
	cfgPath := filepath.Join(dir, "unwound.toml")
	os.WriteFile(cfgPath, []byte("[queue]\ndir = \""+qdir+"\"\nallow_volatile = true\n[rate_limit]\nstate_dir = \""+filepath.Join(dir, "run")+"\"\n"), 0o644)

	f, err := os.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf strings.Builder
	args := []string{strconv.Itoa(pid), strconv.Itoa(pid), "11", strconv.FormatInt(time.Now().Unix(), 10), "1", "0", strings.ReplaceAll(bin, "/", "!"), "parked"}
	if rc := RunKernel(KernelOptions{ConfigPath: cfgPath, Args: args, Stdin: f, Log: NewLogger(&logBuf)}); rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	t.Log(logBuf.String())
	q, _ := queue.Open(qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	es, _ := q.List()
	if len(es) != 1 {
		t.Fatalf("%d queue entries, want 1", len(es))
	}
	z, _ := q.Read(es[0].Name)
	live, err := decode.Report(z)
	if err != nil {
		t.Fatal(err)
	}
	if live.Handler.Mode != "live" {
		t.Errorf("mode %q, want live (errors: %v)", live.Handler.Mode, live.Errors)
	}
	if live.Exe != bin || len(live.Threads) != 3 {
		t.Errorf("exe %q, %d threads", live.Exe, len(live.Threads))
	}
	off, err := Offline(OfflineOptions{CoreFile: core, Config: config.Default(), Log: NewLogger(&logBuf)})
	if err != nil {
		t.Fatal(err)
	}
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
func parkedCore(t *testing.T) (dir, bin, core string, pid int) {
	for _, tool := range []string{"gcc", "gcore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	dir = t.TempDir()
	src := filepath.Join(dir, "parked.c")
	bin = filepath.Join(dir, "parked")
	os.WriteFile(src, []byte(parkedSrc), 0o644)
	if out, err := exec.Command("gcc", "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	buf := make([]byte, 6)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	pid = cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	core = filepath.Join(dir, "core")
	if out, err := exec.Command("gcore", "-o", core, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Skipf("gcore cannot attach here: %v\n%s", err, out)
	}
	return dir, bin, core + "." + strconv.Itoa(pid), pid
}

// TestKernelModeCoreFileOnStdin: a core file given on standard input in
// kernel mode, as one tries the handler by hand (`unwound-handler ARGS <
// core`), is read as a file: the whole trace, as offline, where a stream
// reader gave "core stream: invalid argument" (splice takes only pipes)
// and one frame. The real binary, supervised as by default, on a real core
// of a process that is gone.
func TestKernelModeCoreFileOnStdin(t *testing.T) {
	_, _, core, _ := parkedCore(t)
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
	q, _ := queue.Open(h.qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	es, _ := q.List()
	if len(es) != 1 {
		t.Fatalf("%d reports\n%s", len(es), out)
	}
	z, _ := q.Read(es[0].Name)
	r, err := decode.Report(z)
	if err != nil {
		t.Fatal(err)
	}
	if r.Handler.Mode != "file" || r.Partial || len(r.Errors) != 0 {
		t.Errorf("mode %q, partial %v, errors %q\n%s", r.Handler.Mode, r.Partial, r.Errors, out)
	}
	off, err := Offline(OfflineOptions{CoreFile: core, Config: config.Default(), Log: NewLogger(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
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
