package handler

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/handler/coredumpsock"
	"github.com/unwound-dev/unwound/testkit/syncbuf"
	"golang.org/x/sys/unix"
)

// workerOf returns the pid of the server's idle pre-started worker (its
// child with ChildFlag workerArg as arguments, waiting in recvmsg),
// waiting up to 5 s for one other than not; 0 when none came.
func workerOf(srv, not int) int {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		ds, _ := os.ReadDir("/proc")
		for _, d := range ds {
			pid, err := strconv.Atoi(d.Name())
			if err != nil || pid == not || ppidOf(pid) != srv {
				continue
			}
			cmd, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
			if bytes.HasSuffix(cmd, []byte("\x00"+ChildFlag+"\x00"+workerArg+"\x00")) && inRecvmsg(pid) {
				return pid
			}
		}
	}
	return 0
}

// inRecvmsg says whether a thread of pid waits in recvmsg(2).
func inRecvmsg(pid int) bool {
	ts, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	for _, f := range ts {
		if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), strconv.Itoa(unix.SYS_RECVMSG)+" ") {
			return true
		}
	}
	return false
}

// ppidOf reads a process's parent from /proc/<pid>/stat (the field after
// the parenthesised command and the state).
func ppidOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestHostSocketWorker: the supervised server keeps a worker started
// ahead, small and idle; a crash is unwound in it (the server's log names
// it, the report is live and the pidfd came along), and the next worker
// is started right after and serves the next crash.
func TestHostSocketWorker(t *testing.T) {
	h := newSocketHost(t)
	srv := h.srv.Process.Pid
	w := workerOf(srv, 0)
	if w == 0 {
		t.Fatalf("no pre-started worker; server log:\n%s", h.srvLog)
	}
	time.Sleep(200 * time.Millisecond)
	t.Logf("idle: server %s; worker %s", rssLine(srv), rssLine(w))
	if kib := vmRSS(w); kib > 8<<10 {
		t.Errorf("idle worker RSS %d KiB", kib)
	}
	for i := 0; i < 2; i++ {
		pid, took, _ := h.crash(t)
		r := waitReport(t, h.q, pid)
		if r.Handler.Mode != "live" || len(r.Errors) != 0 || len(frameKeys(r)) < 3 {
			t.Errorf("crash %d: mode %s, errors %q, frames %q", i, r.Handler.Mode, r.Errors, frameKeys(r))
		}
		log := h.srvLog.String()
		// Any worker: core_pattern is the host's, and another program's
		// crash meanwhile would take the one seen idle.
		if !strings.Contains(log, fmt.Sprintf("pid %d: unwinding in the pre-started worker ", pid)) {
			t.Fatalf("crash %d (pid %d) not in a worker (%d was idle):\n%s", i, pid, w, log)
		}
		if !strings.Contains(logLine(log, fmt.Sprintf("pid %d (", pid)), "live mode (pidfd)") {
			t.Errorf("crash %d: the worker did not check the pidfd it was handed:\n%s", i, log)
		}
		t.Logf("crash %d: pid %d in worker %d, reaped after %v, frozen %d ms", i, pid, w, took, r.Handler.FrozenMS)
		next := workerOf(srv, w)
		if next == 0 {
			t.Fatalf("no new worker after crash %d:\n%s", i, log)
		}
		w = next
	}
}

// TestHostSocketWorkerFallback: a crash that finds no usable worker is
// unwound by a child started for it, as before the worker: the idle
// worker killed (the hand-over fails, the server says so and starts a
// child), and a storm of 8 crashes at once (one worker idle at a time).
func TestHostSocketWorkerFallback(t *testing.T) {
	h := newSocketHost(t)
	srv := h.srv.Process.Pid
	w := workerOf(srv, 0)
	if w == 0 {
		t.Fatalf("no pre-started worker; server log:\n%s", h.srvLog)
	}
	syscall.Kill(w, syscall.SIGKILL)
	pid, _, _ := h.crash(t)
	if r := waitReport(t, h.q, pid); r.Handler.Mode != "live" || len(r.Errors) != 0 {
		t.Errorf("dead worker: mode %s, errors %q", r.Handler.Mode, r.Errors)
	}
	if want := fmt.Sprintf("pid %d: the pre-started worker %d: ", pid, w); !strings.Contains(h.srvLog.String(), want) {
		t.Errorf("no %q in the server log:\n%s", want, h.srvLog)
	}
	if workerOf(srv, w) == 0 {
		t.Fatalf("no worker after the dead one:\n%s", h.srvLog)
	}

	const n = 8
	pids := make([]int, n)
	var wg sync.WaitGroup
	for i := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pids[i], _, _ = h.crash(t)
		}()
	}
	wg.Wait()
	inWorker, started := 0, 0
	for _, pid := range pids {
		if r := waitReport(t, h.q, pid); r.Handler.Mode != "live" {
			t.Errorf("storm: pid %d mode %s", pid, r.Handler.Mode)
		}
		log := h.srvLog.String()
		switch {
		case strings.Contains(log, fmt.Sprintf("pid %d: unwinding in the pre-started worker", pid)):
			inWorker++
		case strings.Contains(log, fmt.Sprintf("pid %d: no pre-started worker idle; starting a child", pid)):
			started++
		}
	}
	t.Logf("storm of %d: %d in a pre-started worker, %d in a child started for it", n, inWorker, started)
	if inWorker+started != n || started == 0 {
		t.Errorf("storm of %d: %d in a worker, %d started: want all, some started\n%s", n, inWorker, started, h.srvLog)
	}
}

// TestHostSocketIdleExit: started by socket activation (the listening
// socket as fd 3, LISTEN_FDS and LISTEN_PID, as systemd passes it), the
// server exits after handler.socket_idle_exit with nothing in hand; a
// crash after that waits in the socket's backlog (the kernel holds the
// task), and the server started again for it, as systemd would, serves
// it, starts a worker after it, and exits again, its worker with it.
func TestHostSocketIdleExit(t *testing.T) {
	h := newSocketHost(t)
	h.srv.Process.Signal(syscall.SIGTERM)
	h.srv.Wait()
	text, _ := os.ReadFile(h.cfg)
	os.WriteFile(h.cfg, bytes.Replace(text, []byte("[handler]\n"), []byte("[handler]\nsocket_idle_exit = \"1s\"\n"), 1), 0o644)
	os.Remove(h.sock)
	ln, err := coredumpsock.Listen(h.sock, coredumpsock.DefaultBacklog)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	activate := func() (*exec.Cmd, *syncbuf.Buffer) {
		log := &syncbuf.Buffer{}
		cmd := exec.Command("sh", "-c", `LISTEN_FDS=1 LISTEN_PID=$$ exec "$0" "$@"`, h.bin, "--config", h.cfg, "--serve-coredump-socket", filepath.Join(h.dir, "unused.sock"))
		cmd.ExtraFiles = []*os.File{ln}
		cmd.Env = append(os.Environ(), "UNWOUND_LOG_STDERR=1")
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() }) // reaped by exited's Wait
		return cmd, log
	}
	exited := func(cmd *exec.Cmd, within time.Duration) (time.Duration, bool) {
		start := time.Now()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
			return time.Since(start), true
		case <-time.After(within):
			return within, false
		}
	}

	start := time.Now()
	srv, log := activate()
	if _, ok := exited(srv, 10*time.Second); !ok {
		t.Fatalf("the activated server did not exit within 10 s of idling:\n%s", log)
	}
	idle := time.Since(start)
	t.Logf("exited %v after its start (socket_idle_exit 1s): %v", idle, srv.ProcessState)
	if !srv.ProcessState.Success() || idle < time.Second || !strings.Contains(log.String(), "idle for 1s, exiting") {
		t.Errorf("exit after %v: %v\n%s", idle, srv.ProcessState, log)
	}
	if _, err := os.Stat(h.sock); err != nil {
		t.Fatalf("the socket went with the server: %v", err)
	}

	// A crash with no server: it waits in the backlog.
	before := atPath(h.sock)
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+h.prog)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { cmd.Wait(); close(reaped) }()
	select {
	case <-reaped:
		t.Fatalf("the crash was reaped with no server: %v", cmd.ProcessState)
	case <-time.After(500 * time.Millisecond):
	}
	// Not reaped: the kernel connected and waits for the answer (with
	// nothing listening it would have given up at once:
	// TestHostSocketMissing).
	if n := atPath(h.sock); n <= before {
		t.Errorf("/proc/net/unix lists %d sockets at %s, %d before the crash: nothing queued", n, h.sock, before)
	} else {
		t.Logf("crash pid %d held with no server; sockets at the path: %d before, %d after", cmd.Process.Pid, before, n)
	}
	t0 := time.Now()
	srv, log = activate()
	select {
	case <-reaped:
	case <-time.After(20 * time.Second):
		t.Fatalf("the queued crash was not served:\n%s", log)
	}
	r := waitReport(t, h.q, cmd.Process.Pid)
	t.Logf("queued crash: reaped and reported %v after the restart, mode %s", time.Since(t0), r.Handler.Mode)
	if r.Handler.Mode != "live" || len(frameKeys(r)) < 3 {
		t.Errorf("queued crash: mode %s, frames %q", r.Handler.Mode, frameKeys(r))
	}
	// Activated by a crash, the server starts its first worker once that
	// crash is handled; the worker goes with the server.
	w := workerOf(srv.Process.Pid, 0)
	if d, ok := exited(srv, 10*time.Second); !ok {
		t.Errorf("the restarted server did not exit when idle again")
	} else {
		t.Logf("the restarted server exited %v after the report", d)
	}
	if w == 0 {
		t.Errorf("no worker after the first crash:\n%s", log)
	} else if !gone(w, 2*time.Second) {
		t.Errorf("worker %d outlived its server: %s", w, readStat(w))
	}
}

// rssLine is a process's RSS and its parts, KiB.
func rssLine(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "Rss") {
			out = append(out, k+" "+strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return strings.Join(out, ", ") + " KiB"
}

// logLine is the first line of log that holds s.
func logLine(log, s string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

func readStat(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return string(b)
}

// gone waits for a process that is not ours to end (or be a zombie).
func gone(pid int, within time.Duration) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil || strings.Contains(readStat(pid), ") Z ") {
			return true
		}
	}
	return false
}

// atPath counts the sockets /proc/net/unix lists at path.
func atPath(path string) int {
	b, _ := os.ReadFile("/proc/net/unix")
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(l, " "+path) {
			n++
		}
	}
	return n
}

// TestHostSocketWorkerDies: the pre-started worker is supervised as a
// started child is: one that hangs is killed a little after the deadline,
// one that panics dies, and either way the server writes the
// registers-only report from the notes it read (a handler built with
// -tags unwoundfault, UNWOUND_FAULT in the server's environment, which
// its workers inherit).
func TestHostSocketWorkerDies(t *testing.T) {
	h := newSocketHost(t)
	b, err := os.ReadFile(handlerBinary(t, "unwoundfault"))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(h.cfg)
	os.WriteFile(h.cfg, bytes.Replace(text, []byte("[handler]\n"), []byte("[handler]\ndeadline = \"1s\"\n"), 1), 0o644)
	for _, tc := range []struct{ fault, why string }{
		{"hang", "the unwinding child overran the deadline and was killed"},
		{"panic", "panic: unwoundfault: panic in a goroutine"},
	} {
		h.srv.Process.Signal(syscall.SIGTERM)
		h.srv.Wait()
		os.Remove(h.sock)
		// A new file: the old server's worker may still run the old one.
		h.bin = filepath.Join(h.dir, "unwound-handler-"+tc.fault)
		if err := os.WriteFile(h.bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("UNWOUND_FAULT", tc.fault)
		h.start(t)
		if workerOf(h.srv.Process.Pid, 0) == 0 {
			t.Fatalf("no worker:\n%s", h.srvLog)
		}
		pid, took, _ := h.crash(t)
		r := waitReport(t, h.q, pid)
		t.Logf("%s: reaped after %v, mode %s, errors %q", tc.fault, took, r.Handler.Mode, r.Errors)
		if r.Handler.Mode != "registers" || !strings.Contains(strings.Join(r.Errors, "\n"), tc.why) {
			t.Errorf("%s: mode %s, errors %q; want registers, %q", tc.fault, r.Handler.Mode, r.Errors, tc.why)
		}
		if !strings.Contains(h.srvLog.String(), fmt.Sprintf("pid %d: unwinding in the pre-started worker", pid)) {
			t.Errorf("%s: not in a worker:\n%s", tc.fault, h.srvLog)
		}
	}
}
