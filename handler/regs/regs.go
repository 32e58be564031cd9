// Package regs holds a register set indexed by DWARF register number.
//
// Every architecture's registers are named by their DWARF numbers (x86_64
// psABI §3.6.2, AArch64 DWARF ABI §4.1, RISC-V ELF psABI, ARM DWARF ABI
// §4.1), so CFI rules, EHABI opcodes and frame-pointer walks all read and
// write the same set without switching on the architecture.
package regs

import "fmt"

// Max is one past the highest DWARF register number a set can hold. It
// covers AArch64's V0–V31 (64–95), which CFI saves for d8–d15, and ARM's
// VFP D0–D31 (256–287) is mapped down by the EHABI code.
const Max = 128

// Set is a register set. The zero value holds no registers.
type Set struct {
	val   [Max]uint64
	valid [Max / 64]uint64
}

// Get returns register n and whether it is known.
//
//go:noinline
func (s *Set) Get(n int) (uint64, bool) {
	if n < 0 || n >= Max || s.valid[n/64]&(1<<(n%64)) == 0 {
		return 0, false
	}
	return s.val[n], true
}

// Set records register n. Numbers out of range are ignored.
//
//go:noinline
func (s *Set) Set(n int, v uint64) {
	if n < 0 || n >= Max {
		return
	}
	s.val[n] = v
	s.valid[n/64] |= 1 << (n % 64)
}

// Clear forgets register n.
//
//go:noinline
func (s *Set) Clear(n int) {
	if n < 0 || n >= Max {
		return
	}
	s.valid[n/64] &^= 1 << (n % 64)
}

// Has reports whether register n is known.
func (s *Set) Has(n int) bool {
	_, ok := s.Get(n)
	return ok
}

// String lists the known registers, for logs and test failures.
func (s *Set) String() string {
	out := ""
	for n := 0; n < Max; n++ {
		if v, ok := s.Get(n); ok {
			if out != "" {
				out += " "
			}
			out += fmt.Sprintf("r%d=%#x", n, v)
		}
	}
	return "{" + out + "}"
}
