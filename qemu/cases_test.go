package qemu

import (
	"os"
	"testing"
)

// TestDefaultCases pins the lab's matrix sizes: its run time in make test
// depends on them (docs/qemu-lab.md). The crash matrix's slice adds 8
// crashes per glibc variant and 7 per musl one.
func TestDefaultCases(t *testing.T) {
	if os.Getenv("UNWOUND_MATRIX") == "full" {
		t.Skip("UNWOUND_MATRIX=full: the whole crash matrix")
	}
	for arch, want := range map[string]int{"aarch64": 36 + 2*8 + 2*7, "x86_64": 36 + 4*8 + 2*7, "arm": 36 + 4*6 + 8*3 + 3*8 + 2*7, "riscv64": 36 + 4*3 + 8} {
		n := 0
		for _, c := range DefaultCases(arch) {
			n += len(c.Scenarios)
		}
		if n != want {
			t.Errorf("%s: %d crashes, want %d", arch, n, want)
		}
	}
}
