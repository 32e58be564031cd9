package coredumpsock

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestIdleExit: with IdleExit the accept loop returns once nothing has
// been in hand for that long, leaving the socket listening: a client
// that connects after that waits in the backlog, and the next Serve on
// the same socket takes it (here a local client, turned away as no
// coredump).
func TestIdleExit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &Server{IdleExit: 200 * time.Millisecond}
	start := time.Now()
	if err := s.Serve(ln); err != nil || !s.Idle() {
		t.Fatalf("Serve: %v, idle %v", err, s.Idle())
	}
	if took := time.Since(start); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("idle exit after %v, want 200 ms", took)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatalf("connect after the idle exit: %v", err)
	}
	again := &Server{IdleExit: 200 * time.Millisecond}
	if err := again.Serve(ln); err != nil || !again.Idle() {
		t.Fatalf("second Serve: %v, idle %v", err, again.Idle())
	}
	if n := again.Dropped.Load(); n != 1 {
		t.Errorf("the second server turned away %d connections, want the queued one", n)
	}
}
