package handler

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// TestMatrixFigures runs the crash matrix (fixture.MatrixVariants: the
// slice in make test, everything with UNWOUND_MATRIX=full) on this host's
// cores: real kernel cores for x86_64 (NT_FILE, stream placement),
// qemu-user cores elsewhere (no NT_FILE: the program is placed from
// AT_ENTRY, its libraries from the link map). The handler reads the
// stripped programs, gdb the unstripped ones. For each arch x variant it
// prints the crashed-thread frames equal to gdb's and the wrong frames by
// trust, then a table per family (glibc, musl, lld, mold, static), and
// fails on any wrong frame of high or medium trust and on a family where
// more than 2% of the crashes have a wrong low-trust frame (issue 25).
// The QEMU lab (qemu.TestLab) does the same on real kernels of every arch.
func TestMatrixFigures(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	var mu sync.Mutex
	rows := map[string]*fixture.Figures{}
	eachGDBArch(t, func(t *testing.T, arch string) {
		dir := fixture.Build(t, arch)
		for _, variant := range fixture.MatrixVariants(arch) {
			if _, err := os.Stat(filepath.Join(dir, variant, "stripped", "crash")); err != nil {
				continue // build.sh could not build it here (and said why)
			}
			fig := &fixture.Figures{}
			rows[arch+"/"+variant] = fig
			for _, sc := range matrixScenarios(dir, arch, variant) {
				b := fixture.Binary{Arch: arch, Variant: variant, Prog: fixture.Prog(sc), Dir: dir}
				t.Run(variant+"/"+sc, func(t *testing.T) {
					got, want := matrixCase(t, b, sc)
					mu.Lock()
					defer mu.Unlock()
					before := len(fig.Cases)
					trusted := countFigures(t, fig, b, sc, got, want)
					for _, c := range fig.Cases[before:] {
						t.Logf("wrong frame: %s", c)
					}
					known, isKnown := fixture.KnownWrong[arch+"/"+variant+"/"+sc]
					switch {
					case trusted > 0 && isKnown:
						t.Logf("%d wrong frames at high or medium trust, known: %s", trusted, known)
					case trusted > 0:
						t.Errorf("%d wrong frames at high or medium trust", trusted)
					case isKnown:
						t.Errorf("no wrong frame any more: remove this crash from fixture.KnownWrong")
					}
				})
			}
		}
	})
	// The floors hold for whole rows: a -run pattern naming subtests
	// picks a few crashes of a row.
	whole := !strings.Contains(flag.Lookup("test.run").Value.String(), "/")
	// Issue 16's floor for table-less code with heuristics only: GCC's
	// default on arm, glibc, static and dynamic.
	for _, k := range []string{"arm/gcc-bfd-default-static", "arm/gcc-bfd-default-dynamic"} {
		if fig := rows[k]; whole && fig != nil && fig.Share() < 90 {
			t.Errorf("%s: %d/%d frames equal to gdb's (%.1f%%), want at least 90%%", k, fig.Equal, fig.Want, fig.Share())
		}
	}
	fixture.LogTables(t, "crashed-thread frames against gdb (or the known call chain where gdb fails), by row and by family", rows)
	// musl (issue 16): the rows must not fall below what they reached.
	for name, fl := range fixture.MuslFloors {
		fig := rows[name]
		if !whole || fig == nil || fig.Crashes == 0 {
			continue // not built here, or not wholly in this run
		}
		if fl.Below(fig) {
			t.Errorf("%s: %d/%d frames equal, below the %d/%d it reached", name, fig.Equal, fig.Want, fl.Equal, fl.Want)
		}
	}
	fixture.FamilyGate(t, rows, whole)
}

func matrixScenarios(dir, arch, variant string) []string {
	sc := fixture.ScenariosOf(arch, variant)
	if _, err := os.Stat(filepath.Join(dir, variant, "stripped", "crashxx")); err == nil {
		sc = append(sc, "throw")
	}
	return sc
}

func matrixCase(t *testing.T, b fixture.Binary, scenario string) (*report.Report, *fixture.Trace) {
	core, kernel := fixture.Core(t, b, scenario)
	want, err := fixture.TryOracle(t, b, core, b.Sysroot())
	if errors.Is(err, fixture.ErrGDBTimeout) && fixture.KnownChains[scenario] != nil {
		t.Log(err)
		want = nil // the known chain is the reference
	} else if errors.Is(err, fixture.ErrGDBTimeout) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
	return offlineFixture(t, b, core, kernel, b.Sysroot()), want
}

// countFigures adds one crash to fig: against gdb where gdb's walk follows
// the program's known call structure, against that structure where it
// does not.
func countFigures(t *testing.T, fig *fixture.Figures, b fixture.Binary, scenario string, got *report.Report, want *fixture.Trace) int {
	name := b.Variant + "/" + scenario
	if want != nil && fixture.GDBFollows(want, scenario) {
		return fig.AddGDB(name, got, want)
	}
	th := got.Crashed()
	if th == nil {
		t.Fatal("no crashed thread")
	}
	names := b.FrameNames(t, got, th)
	var meth []string
	for _, f := range th.Frames {
		meth = append(meth, f.Method)
	}
	t.Logf("gdb does not follow the known chain %v; counting against it: %v by %v (stop %s: %s)",
		fixture.KnownChains[scenario], names, meth, th.StopReason, th.StopDetail)
	return fig.AddChain(name, got, names, fixture.KnownChains[scenario])
}

// TestMuslThreadsThroughLibc: the threads of the musl "threads" crash
// that are parked in libc (pthread_cond_wait, pause) have no table from
// frame 0 to their start routine. On AArch64 static, where gdb walks them
// with the unstripped symbols, every one must equal gdb's walk to its
// end: through __timedwait_cp, pthread_cond_timedwait (reached through
// the jumps of __syscall_cp and pthread_cond_wait), the program's
// functions and musl's thread start, with no frame skipped.
func TestMuslThreadsThroughLibc(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	dir := fixture.Build(t, "aarch64")
	b := fixture.Binary{Arch: "aarch64", Variant: "gcc-bfd-default-static-musl", Prog: "crash", Dir: dir}
	if _, err := os.Stat(b.Stripped()); err != nil {
		t.Skipf("not built here: %v", err)
	}
	got, want := matrixCase(t, b, "threads")
	if want == nil {
		t.Skip("no gdb walk of this core")
	}
	fixture.ComparePrefix(t, got, want)
	for _, wt := range want.Threads {
		if wt.Crashed {
			continue
		}
		for _, th := range got.Threads {
			if th.TID == wt.TID && len(th.Frames) < len(wt.Frames) {
				t.Errorf("thread %d: %d frames, gdb walks %d (stop %s: %s)", th.TID, len(th.Frames), len(wt.Frames), th.StopReason, th.StopDetail)
			}
		}
	}
}
