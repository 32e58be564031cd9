// Package kuser checks for the ARM kernel's user helpers, which Go
// binaries built with GOARM=5 or GOARM=6 call for every atomic operation
// and memory barrier (runtime/internal/atomic: __kuser_cmpxchg at
// 0xffff0fc0, __kuser_memory_barrier at 0xffff0fa0). A kernel built with
// CONFIG_KUSER_HELPERS=n (possible on ARMv6+ and on arm64 with COMPAT) does
// not map that page, and such a binary dies at its first atomic, before
// main: it cannot even say why. So the check runs in a binary that can run
// (the GOARM=7 default, or any other architecture's tool on the board) and
// tells whether GOARM=5/6 builds of unwound will work there.
//
// The page is the kernel's gate VMA, named "[vectors]" in /proc/<pid>/maps
// only when CONFIG_KUSER_HELPERS=y (arch/arm/kernel/process.c; for 32-bit
// tasks on arm64, arch/arm64/kernel/vdso.c maps "[vectors]" only then too).
package kuser

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Page is where the helpers live in every 32-bit ARM process.
const Page = 0xffff0000

// ErrMissing says the kernel has no user helpers.
var ErrMissing = errors.New("the kernel maps no ARM user helpers ([vectors] page at 0xffff0000; CONFIG_KUSER_HELPERS=n): " +
	"GOARM=5 and GOARM=6 builds of unwound die at start on it; use the GOARM=7 build (make cross: dist/linux-armv7)")

// Check reads a maps file (/proc/self/maps of a 32-bit ARM process, or of
// any process whose [vectors] page is of interest) and reports ErrMissing
// when no [vectors] mapping covers Page.
func Check(maps io.Reader) error {
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[len(f)-1] != "[vectors]" {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if ok && err1 == nil && err2 == nil && start <= Page && Page < end {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading maps: %w", err)
	}
	return ErrMissing
}

// CheckSelf is Check on this process's own maps. It is meaningful in a
// 32-bit ARM process (GOARCH=arm), where the helpers would be mapped.
func CheckSelf() error {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	return Check(f)
}

// Needed reports whether this binary itself calls the helpers: GOARCH=arm
// built with GOARM 5 or 6. The go command says so with build tags (arm.7
// is set for GOARM=7 only), so no build information is parsed at run time.
func Needed() bool { return needed }

// NeededBy is Needed for the build settings of any binary (as
// debug.ReadBuildInfo or `go version -m` give them).
func NeededBy(settings []debug.BuildSetting) bool {
	arch, arm := "", ""
	for _, s := range settings {
		switch s.Key {
		case "GOARCH":
			arch = s.Value
		case "GOARM":
			arm = s.Value
		}
	}
	arm, _, _ = strings.Cut(arm, ",") // GOARM=6,softfloat (Go 1.22)
	return arch == "arm" && (arm == "5" || arm == "6")
}
