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
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/syncbuf"
	"github.com/unwound-dev/unwound/testkit/testutil"
	"golang.org/x/sys/unix"
)

// The handler on the host's own kernel, core_pattern pointed at it (make
// test-host: opt-in, root; the pattern is restored on every exit path):
// the pipe line with the x86_64 fixtures and with --pidfd=%F, then the
// coredump socket server (--serve-coredump-socket, a kernel of 6.16 or
// later): a crash through it, a storm, a missing and a crashed server, a
// crash in a container, and the supervised worker the server starts
// ahead (hand-over, fallback, socket activation, a worker that dies).

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
	line := testutil.Run(t, bin, "--config", cfg, "--core-pattern")
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
	out := testutil.Run(t, bin, "--config", cfg, "--pidfd", "on", "--core-pattern")
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
	// No save_core_dir: the report must come from the live path alone.
	h.bin, h.cfg, h.qdir, _ = hostHandler(t, dir, false)
	h.prog = buildC(t, dir, "crasher", crashSrc, "-O2")
	// The pattern's restore is set up first, then the socket lines are
	// tried: a kernel before 6.16 refuses both with EINVAL.
	h.pattern = testutil.SwapCoreSocket(t, h.sock)
	if h.pattern == "" {
		t.Skipf("kernel %s takes no coredump socket pattern (6.16 or later does)", sysctl.KernelRelease())
	}
	h.q = openQueue(t, h.qdir)
	h.start(t)
	return h
}

// serverCmd is unwound-handler --serve-coredump-socket sock, its log on
// stderr; with ln, as systemd's socket activation starts it: the socket
// as fd 3, LISTEN_FDS=1 and LISTEN_PID the server's own pid (sh's $$,
// kept by exec).
func serverCmd(bin, cfg, sock string, ln *os.File) *exec.Cmd {
	cmd := exec.Command(bin, "--config", cfg, "--serve-coredump-socket", sock)
	if ln != nil {
		cmd = exec.Command("sh", "-c", `LISTEN_FDS=1 LISTEN_PID=$$ exec "$0" "$@"`, bin, "--config", cfg, "--serve-coredump-socket", sock)
		cmd.ExtraFiles = []*os.File{ln}
	}
	cmd.Env = append(os.Environ(), "UNWOUND_LOG_STDERR=1")
	return cmd
}

// listening waits up to 5 s for a socket at sock.
func listening(sock string) bool {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode().Type() == os.ModeSocket {
			return true
		}
	}
	return false
}

// start runs the server and waits for its socket.
func (h *socketHost) start(t *testing.T) {
	t.Helper()
	h.srvLog = &syncbuf.Buffer{}
	h.srv = serverCmd(h.bin, h.cfg, h.sock, nil)
	h.srv.Env = append(h.srv.Env, "GOTRACEBACK=crash")
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
	if !listening(h.sock) {
		t.Fatalf("no socket at %s; server log:\n%s", h.sock, h.srvLog)
	}
}

// crash runs the crasher and returns its pid and how long until it was
// reaped.
func (h *socketHost) crash(t *testing.T) (int, time.Duration, *os.ProcessState) {
	t.Helper()
	return crashProg(t, h.prog)
}

// storm crashes the crasher n times at once and returns their pids.
func (h *socketHost) storm(t *testing.T, n int) []int {
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
	return pids
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
	if err := os.WriteFile(testutil.CorePatternFile, bytes.TrimSpace(line), 0o644); err != nil {
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
	start := time.Now()
	pids := h.storm(t, n)
	t.Logf("%d crashes reaped in %v", n, time.Since(start))
	got := map[int]*report.Report{}
	pollReports(t, h.q, 60*time.Second, 100*time.Millisecond, func(r *report.Report) bool {
		got[r.PID] = r
		return len(got) >= n
	})
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
	if !pollReports(t, h.q, 20*time.Second, 50*time.Millisecond, func(got *report.Report) bool { r = got; return r.Exe == h.prog }) {
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

// idleWorker is the server's pre-started worker, waiting for a crash.
func (h *socketHost) idleWorker(t *testing.T) int {
	t.Helper()
	w := workerOf(h.srv.Process.Pid, 0)
	if w == 0 {
		t.Fatalf("no pre-started worker; server log:\n%s", h.srvLog)
	}
	return w
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
	b := readStat(pid)
	i := strings.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(b[i+1:])
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
	srv, w := h.srv.Process.Pid, h.idleWorker(t)
	time.Sleep(200 * time.Millisecond)
	t.Logf("idle: server %s; worker %s", rssLine(srv), rssLine(w))
	if kib := statusOf(w, "VmRSS"); kib > 8<<10 {
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
	srv, w := h.srv.Process.Pid, h.idleWorker(t)
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
	pids := h.storm(t, n)
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
		cmd := serverCmd(h.bin, h.cfg, filepath.Join(h.dir, "unused.sock"), ln)
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
		h.idleWorker(t)
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
