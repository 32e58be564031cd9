package qemu

import (
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// The builds the guest tests share: Go commands and C programs for a
// guest architecture.

// goBuild builds a Go command for a guest architecture, failing the test
// on error.
func goBuild(t testing.TB, pkg, arch, out string, flags ...string) string {
	t.Helper()
	if err := BuildGo(pkg, arch, out, flags...); err != nil {
		t.Fatal(err)
	}
	return out
}

// crossCC is the C compiler for a guest architecture.
func crossCC(arch string) string {
	switch arch {
	case "aarch64":
		return "aarch64-linux-gnu-gcc"
	case "arm":
		return "arm-linux-gnueabihf-gcc"
	case "riscv64":
		return "riscv64-linux-gnu-gcc"
	}
	return "x86_64-linux-gnu-gcc"
}

// crossCompile runs the guest architecture's C compiler with args,
// failing the test with the compiler's output on error.
func crossCompile(t testing.TB, arch string, args ...string) {
	t.Helper()
	testutil.Run(t, crossCC(arch), args...)
}
