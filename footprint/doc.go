// Package footprint holds the board binaries' size budgets as a test
// (footprint_test.go), run by `make test`: each binary is built the way
// the Makefile builds it, for 32-bit ARM (GOARM=7) with the oldest Go we
// support, and compared with its budget. docs/design.md ("Footprint") says
// where the bytes go and what was done to shrink them.
package footprint
