// Package flock takes flock(2) locks on files that exist only to be
// locked: the handler's admission slots and the queue's lock file.
package flock

import (
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path, creating it (mode 0600), and locks it with how
// (unix.LOCK_SH or unix.LOCK_EX, optionally |unix.LOCK_NB). A blocking
// flock is interrupted by any signal the process catches (the Go runtime's
// preemption signal among them), so EINTR is retried. The lock lasts
// until the returned file is closed.
func Open(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
