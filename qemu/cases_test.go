package qemu

import (
	"os"
	"testing"
)

// TestDefaultCases pins the lab's matrix sizes: its run time in make test
// depends on them (docs/qemu-lab.md). The crash matrix's slice adds 11
// crashes per glibc variant and 10 per musl one (issue 25's 3 shapes
// among them), and issue 25's shapes with pltstub 4 per ShapeVariants
// variant.
func TestDefaultCases(t *testing.T) {
	if os.Getenv("UNWOUND_MATRIX") == "full" {
		t.Skip("UNWOUND_MATRIX=full: the whole crash matrix")
	}
	for arch, want := range map[string]int{"aarch64": 36 + 4 + 3*11 + 2*10, "x86_64": 36 + 4 + 4*11 + 2*10, "arm": 36 + 4*6 + 8*3 + 4*4 + 3*11 + 2*10, "riscv64": 36 + 4*3 + 2*4 + 2*11} {
		n := 0
		for _, c := range DefaultCases(arch) {
			n += len(c.Scenarios)
		}
		if n != want {
			t.Errorf("%s: %d crashes, want %d", arch, n, want)
		}
	}
}
