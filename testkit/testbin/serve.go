package testbin

import (
	"bufio"
	"bytes"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Server is a running `unwound serve` (or any command that says where it
// listens on stderr).
type Server struct {
	URL string // http://127.0.0.1:port
	Cmd *exec.Cmd
	mu  sync.Mutex
	log bytes.Buffer
}

// Log is what the server wrote to stderr so far.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

var listening = regexp.MustCompile(`listening on (https?://[0-9.:]+)`)

// Serve runs bin with args, which should make it listen on a free port
// (--listen 127.0.0.1:0), and returns once its log says where; the test
// fails if it exits or takes over 30 s. The server is killed when the test
// ends; its stderr is read until then.
func Serve(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{Cmd: cmd}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.mu.Lock()
			s.log.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case u, ok := <-found:
		if !ok {
			t.Fatalf("%s exited:\n%s", bin, s.Log())
		}
		s.URL = u
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start:\n%s", bin, s.Log())
	}
	return s
}
