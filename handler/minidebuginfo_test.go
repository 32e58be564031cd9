package handler

import (
	"os"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

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
