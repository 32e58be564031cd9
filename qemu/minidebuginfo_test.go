package qemu

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// TestLabMiniDebugInfo is issue 17's crash matrix on real kernels: the
// default-flag fixtures (fixture.MiniDebugInfoVariants) crash in a lab
// guest, and each saved core is unwound offline three ways, with the
// program plainly stripped, plus Yocto's MiniDebugInfo and plus ours, and
// compared with gdb on the unstripped program (fixture.CheckMiniDebugInfo:
// ours 100% of gdb's crashed-thread frames, Yocto's at least 97%, no wrong
// frame from tables or symbols). make test runs riscv64 alone, whose cores
// qemu-user cannot write (one boot; handler.TestMiniDebugInfoMatchesGDB
// covers the others on qemu-user cores); UNWOUND_LAB_MDI=all runs every
// architecture and arm-on-aarch64 (a 32-bit ARM userland on the AArch64
// kernel), or give a comma-separated list, e.g. arm,x86_64.
func TestLabMiniDebugInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU guests")
	}
	arches := Arches
	switch s := os.Getenv("UNWOUND_LAB_MDI"); s {
	case "":
		arches = []string{"riscv64"}
	case "all":
	default:
		arches = strings.Split(s, ",")
	}
	var scenarios []string
	for _, s := range append(append([]string(nil), fixture.Scenarios...), "throw") {
		if s != "recursion" {
			scenarios = append(scenarios, s)
		}
	}
	if os.Getenv("UNWOUND_LAB_MDI") == "all" {
		arches = append(arches, "arm-on-aarch64")
	}
	for _, name := range arches {
		// arm-on-aarch64: a 32-bit ARM userland on the AArch64 kernel.
		kernelArch, arch, _ := strings.Cut(name, "-on-")
		if arch == "" {
			arch = kernelArch
		} else {
			kernelArch, arch = arch, kernelArch
		}
		t.Run(name, func(t *testing.T) {
			l := &Lab{KernelArch: kernelArch, Arch: arch, Dir: t.TempDir(), Progress: t.Logf, Cases: Matrix(fixture.MiniDebugInfoVariants(arch), scenarios)}
			res, err := l.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			kinds := append([]string{"plain"}, fixture.MiniDebugInfoKinds...)
			tally := map[string]*fixture.Tally{}
			for _, k := range kinds {
				tally[k] = &fixture.Tally{}
			}
			for _, c := range res.Crashes {
				if c.Core == "" {
					t.Errorf("%s/%s %s: no saved core", c.Variant, c.Prog, c.Scenario)
					continue
				}
				b := fixture.Binary{Arch: arch, Variant: c.Variant, Prog: c.Prog, Dir: res.Fixtures}
				want := fixture.OracleSysroot(t, b, c.Core, res.HostRoot)
				for _, kind := range kinds {
					opts := handler.OfflineOptions{CoreFile: c.Core, Sysroot: res.HostRoot, Config: config.Default(), Log: handler.NewLogger(io.Discard)}
					if kind != "plain" {
						// The guest ran /bin/VARIANT/PROG (the host
						// mirror links it to the plain strip).
						opts.Sources = []module.Source{module.SysrootSource(res.HostRoot, map[string]string{
							"/bin/" + c.Variant + "/" + c.Prog: fixture.WithMiniDebugInfo(t, b, kind),
						})}
					}
					got, err := handler.Offline(opts)
					if err != nil {
						t.Fatal(err)
					}
					if d := tally[kind].Add(got, want); d != "" && kind != "plain" {
						t.Logf("%s/%s/%s: %s", c.Variant, c.Scenario, kind, d)
					}
				}
			}
			for _, kind := range kinds {
				t.Logf("%-7s %-5s: %v", arch, kind, tally[kind])
			}
			fixture.CheckMiniDebugInfo(t, tally)
		})
	}
}
