package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"

	"github.com/unwound-dev/unwound/internal/flock"
	"golang.org/x/sys/unix"
)

// CorePatternFile is the host's kernel.core_pattern.
const CorePatternFile = "/proc/sys/kernel/core_pattern"

// SwapCorePattern saves the host's core_pattern and restores it when the
// test ends, and on SIGINT, SIGTERM or SIGHUP (then exiting), so that an
// interrupted test leaves the host as it was. It returns the function that
// writes a new pattern.
func SwapCorePattern(t testing.TB) func(line string) error {
	t.Helper()
	// One test at a time, machine-wide: go test runs packages in
	// parallel, and two swaps interleaved would each restore what the
	// other had set, leave the host changed, and take each other's
	// crashes meanwhile. The lock is on the sysctl's own file: nothing
	// is left behind.
	lock, err := flock.Open(CorePatternFile, unix.LOCK_EX)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(CorePatternFile)
	if err != nil {
		lock.Close()
		t.Fatal(err)
	}
	restore := func() {
		if err := os.WriteFile(CorePatternFile, old, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "RESTORE FAILED: write %q to %s: %v\n", old, CorePatternFile, err)
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			restore()
			fmt.Fprintf(os.Stderr, "%v: core_pattern restored\n", s)
			os.Exit(1)
		case <-done:
		}
	}()
	t.Cleanup(func() {
		restore()
		signal.Stop(sigs)
		close(done)
		lock.Close()
	})
	return func(line string) error { return os.WriteFile(CorePatternFile, []byte(line), 0o644) }
}

// HostDir is where a test on the host's own kernel works: it skips unless
// opted in (UNWOUND_TEST_HOST=1, as make test-host sets), root, and gcc is
// installed to build the crasher; what says what the test does to the
// host. The directory is short (core_pattern holds 127 characters) and
// removed when the test ends.
func HostDir(t testing.TB, what string) string {
	t.Helper()
	if os.Getenv("UNWOUND_TEST_HOST") != "1" {
		t.Skip("opt-in: make test-host (root; " + what + " and restores it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	dir, err := os.MkdirTemp("", "uw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// SwapCoreSocket points core_pattern at the coredump socket sock, "@@"
// (the kernel sends the pidfd) or, when the kernel refuses that, "@", and
// restores the old pattern as SwapCorePattern does. It returns the
// pattern taken, "" when the kernel takes neither (before 6.16).
func SwapCoreSocket(t testing.TB, sock string) string {
	t.Helper()
	set := SwapCorePattern(t)
	for _, p := range []string{"@@" + sock, "@" + sock} {
		if err := set(p); err == nil {
			return p
		}
	}
	return ""
}
