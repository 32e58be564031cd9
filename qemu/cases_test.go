package qemu

import "testing"

// TestDefaultCases pins the lab's matrix sizes: its run time in make test
// depends on them (docs/qemu-lab.md).
func TestDefaultCases(t *testing.T) {
	for arch, want := range map[string]int{"aarch64": 36, "x86_64": 36, "arm": 36 + 4*6 + 8*3, "riscv64": 36 + 4*3} {
		n := 0
		for _, c := range DefaultCases(arch) {
			n += len(c.Scenarios)
		}
		if n != want {
			t.Errorf("%s: %d crashes, want %d", arch, n, want)
		}
	}
}
