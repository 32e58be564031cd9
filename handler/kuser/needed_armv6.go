//go:build arm && !arm.7

package kuser

// needed: GOARM 5 or 6 builds call the kernel's user helpers for atomics
// and the TLS pointer.
const needed = true
