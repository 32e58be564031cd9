package coredumpsock

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// hostServer runs a Server in this process on a socket in a temporary
// directory and points the host's core_pattern at it ("@@", or "@" when
// the kernel refuses that), restoring the pattern on every exit path
// (cleanup, SIGINT, SIGTERM, SIGHUP). Opt-in, root, and a kernel that
// takes the pattern; it returns the crasher to run.
func hostServer(t *testing.T, s *Server) (crasher string) {
	t.Helper()
	dir := testutil.HostDir(t, "points core_pattern at a coredump socket")
	crasher = filepath.Join(dir, "crasher")
	src := "int main(void) { *(volatile int *)0 = 1; return 0; }\n"
	os.WriteFile(crasher+".c", []byte(src), 0o644)
	testutil.Run(t, "gcc", "-O1", "-o", crasher, crasher+".c")
	sock := filepath.Join(dir, "s.sock")
	ln, err := Listen(sock, DefaultBacklog)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})

	p := testutil.SwapCoreSocket(t, sock)
	if p == "" {
		t.Skip("the kernel takes no coredump socket pattern (6.16 or later does)")
	}
	t.Logf("core_pattern %s", p)
	return crasher
}

// crash starts the crasher; wait returns how it ended and when.
func crash(t *testing.T, prog string) (*exec.Cmd, chan time.Time) {
	t.Helper()
	cmd := exec.Command(prog)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan time.Time, 1)
	go func() { cmd.Wait(); reaped <- time.Now() }()
	return cmd, reaped
}

// TestHostKilledWhileWaiting: the task is killed (SIGKILL) while the
// kernel holds it for the server (COREDUMP_WAIT, the connection still
// open): it dies at once, the handler's side of the connection ends, and
// the server takes the next crash.
func TestHostKilledWhileWaiting(t *testing.T) {
	got := make(chan *Conn, 4)
	release := make(chan struct{})
	s := &Server{Handle: func(c *Conn) {
		n, err := io.Copy(io.Discard, c.File) // the whole core: the kernel waits after it
		t.Logf("pid %d: %d core bytes, %v", c.PID, n, err)
		got <- c
		<-release
	}}
	prog := hostServer(t, s)
	cmd, reaped := crash(t, prog)
	var c *Conn
	select {
	case c = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no connection")
	}
	if c.PID != cmd.Process.Pid || c.DumpMode != 1 {
		t.Errorf("conn pid %d dump mode %d, crasher %d", c.PID, c.DumpMode, cmd.Process.Pid)
	}
	if c.Request == nil {
		t.Log("plain @: the kernel holds the task only under core_pipe_limit")
	}
	select {
	case <-reaped:
		if c.Request != nil {
			t.Fatal("reaped while the server held the connection (COREDUMP_WAIT)")
		}
	case <-time.After(300 * time.Millisecond):
	}
	kill := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case at := <-reaped:
		t.Logf("reaped %v after SIGKILL", at.Sub(kill))
	case <-time.After(5 * time.Second):
		t.Fatal("SIGKILL did not end the task held by the server")
	}
	close(release)
	// The next crash is served.
	cmd, reaped = crash(t, prog)
	select {
	case c := <-got:
		if c.PID != cmd.Process.Pid {
			t.Errorf("next conn pid %d, crasher %d", c.PID, cmd.Process.Pid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection after the kill")
	}
	<-reaped
}

// TestHostDeadline: a handler stuck on one crash never touches its
// connection again; past the deadline the server kills that task, and a
// crash meanwhile is served at once.
func TestHostDeadline(t *testing.T) {
	var n atomic.Int32
	stuck := make(chan struct{})
	s := &Server{Deadline: 500 * time.Millisecond, Grace: 200 * time.Millisecond, Handle: func(c *Conn) {
		if n.Add(1) == 1 {
			<-stuck // never reads, never closes
			return
		}
		io.Copy(io.Discard, c.File)
	}}
	prog := hostServer(t, s)
	t.Cleanup(func() { close(stuck) }) // before the server's cleanup waits for it
	start := time.Now()
	_, first := crash(t, prog)
	for n.Load() == 0 && time.Since(start) < 5*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	_, second := crash(t, prog)
	select {
	case at := <-second:
		t.Logf("second crash reaped %v after the first began", at.Sub(start))
	case <-time.After(3 * time.Second):
		t.Fatal("the second crash waited for the stuck one")
	}
	select {
	case at := <-first:
		took := at.Sub(start)
		t.Logf("stuck crash reaped after %v", took)
		if took < s.Deadline {
			t.Errorf("released before the deadline (%v)", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck crash was not released past the deadline")
	}
	if d := s.Dropped.Load(); d != 0 {
		t.Errorf("%d dropped", d)
	}
}
