// Helpers for the tests that build real programs with a cross toolchain
// and check the unwinder's analyses against them.

package unwind

import (
	"debug/elf"
	"testing"
)

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
