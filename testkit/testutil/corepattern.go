package testutil

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// CorePatternFile is the host's kernel.core_pattern.
const CorePatternFile = "/proc/sys/kernel/core_pattern"

// SwapCorePattern saves the host's core_pattern and restores it when the
// test ends, and on SIGINT, SIGTERM or SIGHUP (then exiting), so that an
// interrupted test leaves the host as it was. It returns the function that
// writes a new pattern.
func SwapCorePattern(t testing.TB) func(line string) error {
	t.Helper()
	old, err := os.ReadFile(CorePatternFile)
	if err != nil {
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
	})
	return func(line string) error { return os.WriteFile(CorePatternFile, []byte(line), 0o644) }
}
