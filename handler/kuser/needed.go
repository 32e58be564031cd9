//go:build !arm || arm.7

package kuser

// needed: this binary never calls the kernel's user helpers (GOARCH is not
// arm, or GOARM=7 inlines its atomics).
const needed = false
