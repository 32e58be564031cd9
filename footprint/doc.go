// Package footprint holds the board binaries' size budgets as a test
// (footprint_test.go), run by `make test`: each binary is built the way
// the Makefile builds it, for 32-bit ARM (GOARM=7) with the Go each
// supported build system ships (1.22.12 and 1.26.3), and compared with its
// budget for that Go. docs/design.md ("Footprint") says
// where the bytes go and what was done to shrink them.
package footprint
