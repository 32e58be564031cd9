// Helpers for the tests that build real programs with a cross toolchain
// and check the unwinder's analyses against them.

package unwind

import (
	"debug/elf"
	"os/exec"
	"testing"
)

// needTool skips the test when the program name is not installed.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skip("needs " + name)
	}
}

// run runs a build step, failing the test with its output.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// symbols is the symbol table of the ELF file at path, the reference the
// analyses of its stripped code are checked against.
func symbols(t *testing.T, path string) []elf.Symbol {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return syms
}
