package handler

import (
	"os"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// The fixtures' crashes unwound from their stripped programs, against gdb
// walking the same cores with the unstripped ones: every variant, and the
// default-flag programs with MiniDebugInfo added.

// TestMatchesGDB is the trust test: for every crash fixture, every
// architecture and build variant, the handler reading the stripped program
// must report, for every thread, the same PCs as gdb walking the same core
// with the unstripped program.
func TestMatchesGDB(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	eachGDBArch(t, func(t *testing.T, arch string) {
		dir := fixture.Build(t, arch)
		variants := fixture.Variants
		if arch == "arm" {
			variants = append(append([]string(nil), variants...), fixture.ARMStateVariants...)
		}
		for _, variant := range variants {
			for _, sc := range fixture.ScenariosWithThrow() {
				b := fixture.Binary{Arch: arch, Variant: variant, Prog: fixture.Prog(sc), Dir: dir}
				t.Run(variant+"/"+sc, func(t *testing.T) { compareWithGDB(t, b, sc) })
			}
		}
	})
}

// gdbArches are the arches whose cores this host makes: the kernel's
// for its own, qemu-user's for the others. riscv64 is not here:
// qemu-riscv64 writes no cores, so the QEMU lab's real kernels give its.
var gdbArches = []string{"x86_64", "aarch64", "arm"}

// eachGDBArch runs f as a subtest per arch of gdbArches.
func eachGDBArch(t *testing.T, f func(t *testing.T, arch string)) {
	for _, arch := range gdbArches {
		t.Run(arch, func(t *testing.T) { f(t, arch) })
	}
}

func compareWithGDB(t *testing.T, b fixture.Binary, scenario string) {
	if b.Arch == "arm" && scenario == "recursion" {
		t.Skip("gdb-multiarch 13 crashes (SIGSEGV) walking this ARM core; the QEMU lab covers deep recursion")
	}
	core, kernel := fixture.Core(t, b, scenario)
	want := fixture.Oracle(t, b, core)
	got := offlineFixture(t, b, core, kernel, fixture.Sysroot(b.Arch))
	if b.Arch == "arm" && strings.HasSuffix(b.Variant, "static") {
		// Stripped static ARM binaries: glibc's libc.a leaves functions
		// without .ARM.exidx entries of their own (abort, start_thread),
		// and without symbols their start is unknown; gdb reads the
		// symbols. The trace may end there, never differ.
		fixture.ComparePrefix(t, got, want)
		return
	}
	fixture.CompareReport(t, got, want)
}

// offlineFixture unwinds a fixture's core offline the way a user would,
// the libraries from sysroot: a core without NT_FILE (qemu-user's, not
// the kernel's) does not name the program, so it is given, stripped.
func offlineFixture(t *testing.T, b fixture.Binary, core string, kernel bool, sysroot string) *report.Report {
	t.Helper()
	opts := OfflineOptions{CoreFile: core, Sysroot: sysroot}
	if !kernel {
		opts.Exe = b.Stripped()
	}
	return offlineReport(t, opts)
}

// TestMiniDebugInfoMatchesGDB is the crash matrix for stripped
// default-flag programs with MiniDebugInfo (fixture.MiniDebugInfoKinds),
// on qemu-user cores (kernel cores for x86_64): with ours the crashed
// thread must be gdb's, frame for frame; with Yocto's at least 97% of
// gdb's frames over the matrix; neither may give a wrong frame from unwind
// tables or symbols (cfi, ehabi, prologue). The QEMU lab's real-kernel
// run is qemu.TestLabMiniDebugInfo.
func TestMiniDebugInfoMatchesGDB(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	eachGDBArch(t, func(t *testing.T, arch string) {
		dir := fixture.Build(t, arch)
		kinds := append([]string{"plain"}, fixture.MiniDebugInfoKinds...)
		tally := map[string]*fixture.Tally{}
		for _, k := range kinds {
			tally[k] = &fixture.Tally{}
		}
		for _, variant := range fixture.MiniDebugInfoVariants(arch) {
			for _, sc := range fixture.ScenariosWithThrow() {
				if sc == "recursion" {
					continue // elided traces; TestMatchesGDB and the lab cover them
				}
				b := fixture.Binary{Arch: arch, Variant: variant, Prog: fixture.Prog(sc), Dir: dir}
				if _, err := os.Stat(b.Stripped()); err != nil {
					continue
				}
				core, kernel := fixture.Core(t, b, sc)
				want := fixture.Oracle(t, b, core)
				for _, kind := range kinds {
					exe := b.Stripped()
					if kind != "plain" {
						exe = fixture.WithMiniDebugInfo(t, b, kind)
					}
					opts := OfflineOptions{CoreFile: core, Sysroot: fixture.Sysroot(arch)}
					if !kernel {
						opts.Exe = exe
					} else {
						// A kernel core names the program in NT_FILE.
						opts.Sources = []module.Source{module.SysrootSource("/", map[string]string{b.Stripped(): exe})}
					}
					if d := tally[kind].Add(offlineReport(t, opts), want); d != "" && kind != "plain" {
						t.Logf("%s/%s/%s: %s", variant, sc, kind, d)
					}
				}
			}
		}
		for _, kind := range kinds {
			t.Logf("%-7s %-5s: %v", arch, kind, tally[kind])
		}
		fixture.CheckMiniDebugInfo(t, tally)
	})
}
