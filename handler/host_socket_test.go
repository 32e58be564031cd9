package handler

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/syncbuf"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// socketHost is the coredump socket server on the host's own kernel:
// unwound-handler --serve-coredump-socket in dir, core_pattern @@ (or @
// on a 6.16 kernel that refuses @@) pointing at it, restored on every
// exit path. It skips unless opted in, root, and the kernel takes the
// pattern.
type socketHost struct {
	dir, bin, cfg, qdir, sock, pattern string
	prog                               string
	q                                  *queue.Queue
	srv                                *exec.Cmd
	srvLog                             *syncbuf.Buffer
}

func newSocketHost(t *testing.T) *socketHost {
	t.Helper()
	dir := testutil.HostDir(t, "points core_pattern at a coredump socket")
	h := &socketHost{dir: dir, sock: filepath.Join(dir, "coredump.sock")}
	h.bin, h.cfg, h.qdir, _ = hostHandler(t, dir)
	// No save_core_dir: the report must come from the live path alone.
	text, _ := os.ReadFile(h.cfg)
	text = regexpLine(text, "save_core_dir")
	os.WriteFile(h.cfg, text, 0o644)
	h.prog = buildCrasher(t, dir)
	// The pattern's restore is set up first, then the socket lines are
	// tried: a kernel before 6.16 refuses both with EINVAL.
	h.pattern = testutil.SwapCoreSocket(t, h.sock)
	if h.pattern == "" {
		t.Skipf("kernel %s takes no coredump socket pattern (6.16 or later does)", sysctl.KernelRelease())
	}
	var err error
	h.q, err = queue.Open(h.qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	if err != nil {
		t.Fatal(err)
	}
	h.start(t)
	return h
}

// regexpLine drops the lines of text that start with key.
func regexpLine(text []byte, key string) []byte {
	var out []string
	for _, l := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), key) {
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n"))
}

// start runs the server and waits for its socket.
func (h *socketHost) start(t *testing.T) {
	t.Helper()
	h.srvLog = &syncbuf.Buffer{}
	h.srv = exec.Command(h.bin, "--config", h.cfg, "--serve-coredump-socket", h.sock)
	h.srv.Env = append(os.Environ(), "UNWOUND_LOG_STDERR=1", "GOTRACEBACK=crash")
	h.srv.Stderr = h.srvLog
	if err := h.srv.Start(); err != nil {
		t.Fatal(err)
	}
	srv := h.srv
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", h.srvLog)
		}
	})
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(h.sock); err == nil && fi.Mode().Type() == os.ModeSocket {
			return
		}
	}
	t.Fatalf("no socket at %s; server log:\n%s", h.sock, h.srvLog)
}

// crash runs the crasher and returns its pid and how long until it was
// reaped.
func (h *socketHost) crash(t *testing.T) (int, time.Duration, *os.ProcessState) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+h.prog)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	return cmd.Process.Pid, time.Since(start), cmd.ProcessState
}

// frameKeys are the crashed thread's frames as module path and file
// address: equal across runs whatever the address-space layout.
func frameKeys(r *report.Report) []string {
	ct := r.Crashed()
	if ct == nil {
		return nil
	}
	var out []string
	for _, f := range ct.Frames {
		if f.Module < 0 || f.Module >= len(r.Modules) {
			out = append(out, fmt.Sprintf("?:%s", f.Method))
			continue
		}
		m := r.Modules[f.Module]
		out = append(out, fmt.Sprintf("%s+%#x", filepath.Base(m.Path), m.FileAddr(f.PC)))
	}
	return out
}

// TestHostSocket: a real crash through the kernel's coredump socket gives
// a live report whose crashed-thread frames equal the pipe mode's for the
// same program.
func TestHostSocket(t *testing.T) {
	h := newSocketHost(t)
	t.Logf("core_pattern %s", h.pattern)
	pid, took, st := h.crash(t)
	r := waitReport(t, h.q, pid)
	if r.Handler.Mode != "live" || len(r.Errors) != 0 {
		t.Errorf("socket: mode %s, errors %q; want live, none", r.Handler.Mode, r.Errors)
	}
	if r.Exe != h.prog || len(r.Threads) != 2 || r.Signal.Number != 11 {
		t.Errorf("socket: exe %q, %d threads, signal %d", r.Exe, len(r.Threads), r.Signal.Number)
	}
	if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGSEGV {
		t.Errorf("crasher ended with %v, want SIGSEGV", st)
	}
	sock := frameKeys(r)
	t.Logf("socket: pid %d reaped after %v, frozen %d ms, frames %q", pid, took, r.Handler.FrozenMS, sock)

	line, err := exec.Command(h.bin, "--config", h.cfg, "--pidfd", "off", "--core-pattern").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corePatternFile, bytes.TrimSpace(line), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, _, _ = h.crash(t)
	rp := waitReport(t, h.q, pid)
	pipe := frameKeys(rp)
	if rp.Handler.Mode != "live" || len(pipe) < 3 || strings.Join(pipe, " ") != strings.Join(sock, " ") {
		t.Errorf("pipe mode (%s) frames %q, socket's %q", rp.Handler.Mode, pipe, sock)
	}
}

// TestHostSocketStorm: 64 crashes at once all reach the server (the
// backlog holds them) and each is reported.
func TestHostSocketStorm(t *testing.T) {
	h := newSocketHost(t)
	const n = 64
	pids := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pids[i], _, _ = h.crash(t)
		}()
	}
	wg.Wait()
	t.Logf("%d crashes reaped in %v", n, time.Since(start))
	got := map[int]*report.Report{}
	for end := time.Now().Add(60 * time.Second); len(got) < n && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		es, _ := h.q.List()
		for _, e := range es {
			z, err := h.q.Read(e.Name)
			if err != nil {
				continue
			}
			if r, err := decode.Report(z); err == nil {
				got[r.PID] = r
			}
		}
	}
	live := 0
	for _, pid := range pids {
		r := got[pid]
		if r == nil {
			t.Errorf("pid %d: no report", pid)
			continue
		}
		if r.Handler.Mode == "live" {
			live++
		}
	}
	t.Logf("%d reports, %d live, in %v", len(got), live, time.Since(start))
	if n := strings.Count(h.srvLog.String(), "drift: "); n > 2*len(sysctl.Check("", "", "", 0))+2 {
		t.Errorf("%d drift lines in a storm of %d crashes: checked once a minute, not once a crash", n, len(pids))
	}
	if strings.Contains(h.srvLog.String(), "dropping a core") {
		t.Errorf("the server dropped cores:\n%s", h.srvLog)
	}
}

// TestHostSocketMissing: with no server behind the pattern the kernel
// writes nothing, the crash is not held, and the drift check says so.
func TestHostSocketMissing(t *testing.T) {
	h := newSocketHost(t)
	h.srv.Process.Signal(syscall.SIGTERM)
	h.srv.Wait()
	// SIGTERM leaves the socket file (systemd's socket unit keeps its
	// own): nothing listens there. Then the file goes too.
	pid, took, st := h.crash(t)
	if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.CoreDump() {
		t.Errorf("crasher: %v (want killed by its signal, no core)", st)
	}
	if took > 2*time.Second {
		t.Errorf("crash took %v to reap", took)
	}
	time.Sleep(200 * time.Millisecond)
	if es, _ := h.q.List(); len(es) != 0 {
		t.Errorf("pid %d: %d reports with no server", pid, len(es))
	}
	drift := sysctl.Drift(sysctl.Read(sysctl.ProcSys), sysctl.Want{Config: h.cfg, Socket: h.sock, Root: "/"})
	if !strings.Contains(strings.Join(drift, "\n"), "nothing listens at "+h.sock) {
		t.Errorf("drift does not say nothing listens: %q", drift)
	}
	os.Remove(h.sock)
	if _, _, st := h.crash(t); st.Sys().(syscall.WaitStatus).CoreDump() {
		t.Errorf("no socket: %v", st)
	}
	drift = sysctl.Drift(sysctl.Read(sysctl.ProcSys), sysctl.Want{Config: h.cfg, Socket: h.sock, Root: "/"})
	if !strings.Contains(strings.Join(drift, "\n"), "there is no socket at "+h.sock) {
		t.Errorf("drift does not name the missing socket: %q", drift)
	}
}

// TestHostSocketServerCrash: the server's own crash does not come back to
// it (it is not dumpable: the kernel would connect to the dying server's
// socket): it dies at once, and a new server serves the next crash.
func TestHostSocketServerCrash(t *testing.T) {
	h := newSocketHost(t)
	start := time.Now()
	// GOTRACEBACK=crash: the runtime re-raises SIGABRT to die by it,
	// which dumps core for a dumpable process.
	h.srv.Process.Signal(syscall.SIGABRT)
	done := make(chan error, 1)
	go func() { done <- h.srv.Wait() }()
	select {
	case err := <-done:
		t.Logf("server died in %v: %v", time.Since(start), err)
		if ws, ok := h.srv.ProcessState.Sys().(syscall.WaitStatus); ok && ws.CoreDump() {
			t.Errorf("the server dumped core: %v", h.srv.ProcessState)
		}
	case <-time.After(10 * time.Second):
		h.srv.Process.Kill()
		t.Fatalf("the crashed server did not die within 10 s (dumping into itself?)")
	}
	os.Remove(h.sock) // what systemd's socket unit keeps; a plain restart binds anew
	h.start(t)
	pid, _, _ := h.crash(t)
	if r := waitReport(t, h.q, pid); r.Handler.Mode != "live" {
		t.Errorf("after the restart: mode %s", r.Handler.Mode)
	}
}

// TestHostSocketContainer: a crash in another pid and mount namespace
// reaches the host's server (the kernel looks the socket up from init's
// root) and the report says which container: its namespaces and cgroup.
func TestHostSocketContainer(t *testing.T) {
	h := newSocketHost(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	cmd := exec.Command("unshare", "--pid", "--mount", "--fork", "sh", "-c", "ulimit -c unlimited; exec "+h.prog)
	cmd.Run()
	var r *report.Report
	for end := time.Now().Add(20 * time.Second); r == nil && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		es, _ := h.q.List()
		for _, e := range es {
			if z, err := h.q.Read(e.Name); err == nil {
				if got, err := decode.Report(z); err == nil && got.Exe == h.prog {
					r = got
				}
			}
		}
	}
	if r == nil {
		t.Fatal("no report for the crash in the container")
	}
	ours := nsInode(os.Getpid(), "pid")
	c := r.Container
	if c == nil || c.PidNS == 0 || c.PidNS == ours || c.MntNS == nsInode(os.Getpid(), "mnt") || c.Cgroup == "" {
		t.Fatalf("container %+v (handler's pid ns %d)", c, ours)
	}
	if r.Handler.Mode != "live" || len(frameKeys(r)) < 3 {
		t.Errorf("mode %s, frames %q", r.Handler.Mode, frameKeys(r))
	}
	t.Logf("pid %d: container %+v, frames %q", r.PID, *c, frameKeys(r))
}

func TestCgroupPath(t *testing.T) {
	for in, want := range map[string]string{
		"0::/system.slice/docker-abc.scope\n":                      "/system.slice/docker-abc.scope",
		"12:pids:/lxc/c1\n11:memory:/lxc/c1\n0::/lxc.payload.c1\n": "/lxc.payload.c1",
		"4:cpu:/docker/xyz\n":                                      "/docker/xyz",
		"":                                                         "",
	} {
		if got := cgroupPath(in); got != want {
			t.Errorf("cgroupPath(%q) = %q, want %q", in, got, want)
		}
	}
}
