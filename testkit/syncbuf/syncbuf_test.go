package syncbuf

import (
	"os/exec"
	"strings"
	"testing"
)

// TestReadWhileAProcessWrites: the test reads the log while os/exec's
// goroutine copies a child's output into it, and every line arrives
// (go test -race checks the locking).
func TestReadWhileAProcessWrites(t *testing.T) {
	var b Buffer
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 500 ]; do echo line $i; i=$((i+1)); done")
	cmd.Stdout = &b
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for reading := true; reading; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			reading = false
		default:
			_ = b.String()
		}
	}
	if n := strings.Count(b.String(), "\n"); n != 500 {
		t.Errorf("%d lines, want 500", n)
	}
}
