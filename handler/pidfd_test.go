package handler

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
	"golang.org/x/sys/unix"
)

func TestParsePidfdInfo(t *testing.T) {
	for _, tc := range []struct {
		in      string
		pid     int
		ok, bad bool
	}{
		{"pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1234\nPid:\t4242\nNSpid:\t4242\n", 4242, true, false},
		{"pos:\t0\nflags:\t02\nmnt_id:\t15\nPid:\t-1\nNSpid:\t-1\n", -1, true, false},
		{"Pid:\t0\n", 0, true, false},
		{"pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t99\n", 0, false, false}, // a pipe
		{"eventfd-count:    0\n", 0, false, false},
		{"Pid:\tx\n", 0, true, true},
		{"Pid:\t-7\n", 0, true, true},
		{"", 0, false, false},
	} {
		pid, ok, err := parsePidfdInfo([]byte(tc.in))
		if pid != tc.pid || ok != tc.ok || (err != nil) != tc.bad {
			t.Errorf("%q: %d %v %v, want %d %v bad=%v", tc.in, pid, ok, err, tc.pid, tc.ok, tc.bad)
		}
	}
}

func FuzzParsePidfdInfo(f *testing.F) {
	for _, s := range []string{
		"pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1234\nPid:\t4242\nNSpid:\t4242 1\n",
		"Pid:\t-1\n", "Pid:\t0\n", "Pid:", "Pid:\t99999999999999999999\n", "pos:\t0\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pid, ok, err := parsePidfdInfo(b)
		if err != nil && !ok {
			t.Fatalf("error without a Pid: line: %v", err)
		}
		if err == nil && pid < -1 {
			t.Fatalf("pid %d", pid)
		}
	})
}

// A real pidfd of a live child gives its pid; once the child is reaped it
// says the process is gone; a pipe is no pidfd.
func TestPidfdPID(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(fd)
	p, err := openPidfd(fd, cmd.Process.Pid)
	if err != nil || p.same() != nil {
		t.Fatalf("openPidfd: %v", err)
	}
	if _, err := openPidfd(fd, cmd.Process.Pid+1); err == nil {
		t.Errorf("the pidfd of %d taken for pid %d", cmd.Process.Pid, cmd.Process.Pid+1)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if err := p.same(); !errors.Is(err, errPidfdGone) {
		t.Errorf("after reaping: %v, want %v", err, errPidfdGone)
	}
	if _, err := pidfdPID(fd); !errors.Is(err, errPidfdGone) {
		t.Errorf("pidfdPID after reaping: %v", err)
	}

	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	if _, err := pidfdPID(int(r.Fd())); err == nil || !strings.Contains(err.Error(), "not a pidfd") {
		t.Errorf("a pipe: %v", err)
	}
}

// A stray fd given as --pidfd is ignored with a log line, and the handler
// goes on by pid as before.
func TestKernelPidfdStray(t *testing.T) {
	r, w, _ := os.Pipe()
	defer w.Close()
	var log strings.Builder
	fd := int(r.Fd())
	if p := kernelPidfd(NewLogger(&log), strconv.Itoa(fd), os.Getpid()); p != nil {
		t.Fatalf("a pipe taken as a pidfd")
	}
	if !strings.Contains(log.String(), "not a pidfd") {
		t.Errorf("log: %q", log.String())
	}
	if p := kernelPidfd(NewLogger(&log), "", os.Getpid()); p != nil {
		t.Errorf("no --pidfd gave a pidfd")
	}
	if p := kernelPidfd(NewLogger(&log), "1", os.Getpid()); p != nil {
		t.Errorf("--pidfd 1 taken")
	}
}

const pidReuseEnv = "UNWOUND_TEST_PIDREUSE_CHILD"

// TestPidReuse: the crashed process is reaped and its pid given to another
// process before the handler reads /proc/<pid>. With the pidfd the handler
// notices, reads nothing there and reports from the core stream. The test
// runs itself again as pid 1 of a private pid namespace (with its own
// /proc, in a private mount namespace), where ns_last_pid hands the pid
// out again at once; nothing of the host's is touched.
func TestPidReuse(t *testing.T) {
	if os.Getenv(pidReuseEnv) == "1" {
		pidReuseInNamespace(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: a private pid namespace")
	}
	for _, tool := range []string{"gcc", "gcore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPidReuse$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), pidReuseEnv+"=1")
	// Unshareflags CLONE_NEWNS: the runtime makes / private (MS_REC) in
	// the child, so its /proc mount never propagates to the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in the pid namespace:\n%s", out)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skip("skipped in the namespace")
	}
}

func pidReuseInNamespace(t *testing.T) {
	if os.Getpid() != 1 {
		t.Fatalf("pid %d: not the first process of a new pid namespace", os.Getpid())
	}
	if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		t.Fatalf("mounting this namespace's /proc: %v", err)
	}
	dir := t.TempDir()
	bin := buildC(t, dir, "parked", parkedSrc, "-O2")
	// Both the crashed program and the one that gets its pid run the same
	// program without address randomization (setarch -R): the other
	// process's stacks are where the core says the crashed one's were, so
	// a handler going by pid alone reads them and reports the wrong
	// process.
	start := func(who string) (*exec.Cmd, error) {
		c := exec.Command(bin, who)
		if _, err := exec.LookPath("setarch"); err == nil {
			c = exec.Command("setarch", "-R", bin, who)
		}
		return c, startReady(c)
	}
	victim, err := start("victim")
	if err != nil {
		t.Fatal(err)
	}
	pid := victim.Process.Pid
	core := gcore(t, dir, pid)
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pfd)

	// Reaped: the pid is free. The next process of this namespace takes
	// it: ns_last_pid is the namespace's, this namespace's only.
	victim.Process.Kill()
	victim.Wait()
	var impostor *exec.Cmd
	for try := 0; try < 20 && impostor == nil; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Fatalf("ns_last_pid: %v", err)
		}
		c, err := start("impostor")
		if err != nil {
			t.Fatal(err)
		}
		if c.Process.Pid == pid {
			impostor = c
			break
		}
		c.Process.Kill()
		c.Wait()
	}
	if impostor == nil {
		t.Fatalf("pid %d was not reused", pid)
	}
	defer func() { impostor.Process.Kill(); impostor.Wait() }()
	t.Logf("pid %d: the victim is reaped, %s impostor has its pid", pid, bin)

	crash := func(name, pidfdArg string) (*report.Report, string) {
		cfgPath, qdir := kernelConfig{handler: "include_cmdline = true"}.write(t, t.TempDir())
		f, err := os.Open(core)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var log strings.Builder
		RunKernel(KernelOptions{ConfigPath: cfgPath, Args: kernelArgs(pid, bin, "parked"), Stdin: f, Pidfd: pidfdArg, Log: NewLogger(&log)})
		return oneReport(t, qdir, name+": "+log.String()), log.String()
	}

	// Without the pidfd, for the record: the handler takes whoever has the
	// pid now.
	r, log := crash("bypid", "")
	t.Logf("by pid only: mode %s, exe %s, cmdline %q, errors %q\n%s", r.Handler.Mode, r.Exe, r.Cmdline, r.Errors, log)
	if r.Handler.Mode == "live" && strings.Contains(strings.Join(r.Cmdline, " "), "impostor") {
		t.Logf("by pid only, the report is the other process's (its command line %q)", r.Cmdline)
	}

	r, log = crash("pidfd", strconv.Itoa(pfd))
	t.Logf("with the pidfd: mode %s, exe %s, cmdline %q, errors %q\n%s", r.Handler.Mode, r.Exe, r.Cmdline, r.Errors, log)
	// Nothing from /proc: the core on stdin, a regular file, is read as
	// one (a pipe's would be streamed).
	if r.Handler.Mode != "file" {
		t.Errorf("mode %q, want file", r.Handler.Mode)
	}
	if r.Exe != bin {
		t.Errorf("exe %q, want the crashed %q", r.Exe, bin)
	}
	if len(r.Cmdline) != 0 {
		t.Errorf("cmdline %q: read from another process", r.Cmdline)
	}
	if !strings.Contains(strings.Join(r.Errors, "\n"), "no longer the crashed process") {
		t.Errorf("the report does not say why: %q", r.Errors)
	}
	if len(r.Threads) != 3 {
		t.Errorf("%d threads, want the core's 3", len(r.Threads))
	}
}

// BenchmarkPidfdCheck: what one check of the pidfd (PIDFD_GET_INFO and a
// signal 0) costs, against one read of /proc/<pid>/maps, which every live
// unwind does, measured on the same process in the same run.
func BenchmarkPidfdCheck(b *testing.B) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		b.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(fd)
	p := &pidfd{fd: fd, pid: cmd.Process.Pid}
	var check, maps time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := p.same(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := procMaps(p.pid); err != nil {
			b.Fatal(err)
		}
		check += t1.Sub(t0)
		maps += time.Since(t1)
	}
	b.ReportMetric(float64(check.Nanoseconds())/float64(b.N), "check-ns")
	b.ReportMetric(float64(maps.Nanoseconds())/float64(b.N), "maps-ns")
	b.ReportMetric(float64(check)/float64(maps), "check/maps")
}
