package handler

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestHeuristicsAgainstGDB measures the unwinder's heuristics on code
// without unwind tables: the -notables fixtures (ARM Thumb-2 and A32,
// RISC-V 64; GCC's default for C there), stripped as Yocto strips them,
// gdb reading the unstripped programs as the oracle. Per arch it prints
// the crashed thread's frames equal to gdb's, and the wrong ones (a
// different PC at the same depth) per method and trust; frames past gdb's
// last are counted apart, not as wrong. It fails on any wrong frame at
// high or medium trust. Issue 25's shapes (a chain of non-leaf
// functions storing to globals, a handler of a signal sent by kill(),
// 200-deep recursion) are crashed too. Opt-in (UNWOUND_HEURISTICS=1): it
// runs every fixture under qemu-user and gdb.
func TestHeuristicsAgainstGDB(t *testing.T) {
	if os.Getenv("UNWOUND_HEURISTICS") == "" {
		t.Skip("set UNWOUND_HEURISTICS=1 to measure the heuristics against gdb")
	}
	if dir := os.Getenv("UNWOUND_HEURISTICS_LAB"); dir != "" {
		labHeuristics(t, dir)
		return
	}
	for _, arch := range []string{"arm", "riscv64", "aarch64", "x86_64"} {
		arch := arch
		t.Run(arch, func(t *testing.T) {
			if arch == "riscv64" {
				t.Skip("qemu-riscv64 writes no cores: measure the QEMU lab's (UNWOUND_LAB_KEEP, then UNWOUND_HEURISTICS_LAB)")
			}
			var dir string
			var variants []string
			switch arch {
			case "arm", "riscv64":
				dir = fixture.Build(t, arch)
				for _, v := range fixture.Variants {
					variants = append(variants, v+"-notables")
					if arch == "arm" {
						variants = append(variants, v+"-marm-notables")
					}
				}
			default:
				// The fixtures have tables on these arches (GCC's
				// default): build table-less copies here.
				dir, variants = buildNoTables(t, arch)
			}
			var all tally
			for _, variant := range variants {
				var vt tally
				for _, sc := range append(append([]string(nil), fixture.Scenarios...), fixture.ShapeScenarios...) {
					if sc == "recursion" {
						continue // gdb-multiarch crashes on the ARM cores; elision is tested elsewhere
					}
					b := fixture.Binary{Arch: arch, Variant: variant, Prog: "crash", Dir: dir}
					core, kernel := fixture.Core(t, b, sc)
					want := fixture.Oracle(t, b, core)
					got := offlineFixture(t, b, core, kernel, fixture.Sysroot(b.Arch))
					if !fixture.GDBFollows(want, sc) {
						vt.againstChain(t, b, variant+"/"+sc, got, sc)
						continue
					}
					vt.measure(t, variant+"/"+sc, got, want)
				}
				t.Logf("%-22s %s", variant, vt)
				all.merge(vt)
			}
			t.Logf("%-22s %s", "all", all)
		})
	}
}

// labHeuristics measures the cores a QEMU lab run kept
// (UNWOUND_LAB_KEEP=dir): real-kernel cores, where qemu-user writes none
// (RISC-V). UNWOUND_HEURISTICS_LAB names the run's directory, e.g.
// dir/riscv64-riscv64-debian=false.
//
// A run that lists its crashes (fixture.LabCrashesFile) is counted as the
// matrix is, too: figures per arch/variant and per family, written to
// UNWOUND_FIGURES when set. Several run directories may be given,
// separated by commas.
func labHeuristics(t *testing.T, dirs string) {
	rows := map[string]*fixture.Figures{}
	for _, dir := range strings.Split(dirs, ",") {
		if _, err := os.Stat(filepath.Join(dir, fixture.LabCrashesFile)); err == nil {
			labFigures(t, dir, rows)
			continue
		}
		labTally(t, dir)
	}
	if len(rows) == 0 {
		return
	}
	fixture.LogTables(t, "kept lab cores against gdb (or the known chain where gdb fails), by row and by family", rows)
}

// labFigures counts the crashes a kept lab run lists into rows, keyed
// arch/variant (arch@kernel where the run's kernel is another's).
func labFigures(t *testing.T, dir string, rows map[string]*fixture.Figures) {
	js, err := os.ReadFile(filepath.Join(dir, fixture.LabCrashesFile))
	if err != nil {
		t.Fatal(err)
	}
	var crashes []fixture.LabCrash
	if err := json.Unmarshal(js, &crashes); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	for _, c := range crashes {
		if c.Core == "" || c.Prog != "crash" && c.Prog != "crashxx" {
			continue
		}
		if !counted(c.Variant, c.Scenario) {
			continue // compared exactly by the lab, not counted
		}
		label := c.Arch
		if k, _, _ := strings.Cut(filepath.Base(dir), "-"); k != c.Arch {
			label += "@" + k
		}
		b := fixture.Binary{Arch: c.Arch, Variant: c.Variant, Prog: c.Prog, Dir: fixture.Build(t, c.Arch)}
		want, err := fixture.TryOracle(t, b, c.Core, root)
		if err != nil && fixture.KnownChains[c.Scenario] == nil {
			t.Logf("%s/%s/%s pid %d: %.200v", label, c.Variant, c.Scenario, c.PID, err)
			continue
		}
		if err != nil {
			want = nil // the known chain is the reference
		}
		got := offlineReport(t, OfflineOptions{CoreFile: c.Core, Sysroot: root})
		fig := rows[label+"/"+c.Variant]
		if fig == nil {
			fig = &fixture.Figures{}
			rows[label+"/"+c.Variant] = fig
		}
		before := len(fig.Cases)
		countFigures(t, fig, b, c.Scenario, got, want)
		for _, w := range fig.Cases[before:] {
			t.Logf("%s wrong frame: %s", label, w)
		}
	}
}

// counted reports whether the lab counts a crash into its figures (as
// qemu.TestLab does): the matrix's variants (CC-LD-FLAGS-LINK) and
// issue 25's shapes anywhere.
func counted(variant, scenario string) bool {
	if strings.HasPrefix(variant, "gcc-") || strings.HasPrefix(variant, "clang-") || scenario == "pltstub" {
		return true
	}
	for _, s := range fixture.ShapeScenarios {
		if s == scenario {
			return true
		}
	}
	return false
}

// labTally measures a kept run's crash-program cores by method and trust.
func labTally(t *testing.T, dir string) {
	reports, _ := filepath.Glob(filepath.Join(dir, "reports", "*"))
	if len(reports) == 0 {
		t.Fatalf("no reports under %s", dir)
	}
	root := filepath.Join(dir, "root")
	exeRE := regexp.MustCompile(`^/bin/([^/]+)/([^/]+)$`)
	byVariant := map[string]*tally{}
	var all tally
	for _, rp := range reports {
		rep := readReport(t, os.ReadFile, rp)
		mm := exeRE.FindStringSubmatch(rep.Exe)
		var cores []string
		found, _ := filepath.Glob(filepath.Join(dir, "cores", fmt.Sprintf("core.%d.*", rep.PID)))
		for _, c := range found {
			if !strings.HasSuffix(c, ".json") { // gdb's cached answers lie beside the cores
				cores = append(cores, c)
			}
		}
		if mm == nil || len(cores) != 1 || mm[2] != "crash" {
			continue
		}
		b := fixture.Binary{Arch: rep.Arch, Variant: mm[1], Prog: mm[2], Dir: fixture.Build(t, rep.Arch)}
		want, err := fixture.TryOracle(t, b, cores[0], root)
		if err != nil {
			// gdb-multiarch itself crashes on some ARM cores (the deep
			// recursion): nothing to compare with.
			t.Logf("%s/%s pid %d: %.200v", rep.Arch, b.Variant, rep.PID, err)
			continue
		}
		got := offlineReport(t, OfflineOptions{CoreFile: cores[0], Sysroot: root})
		vt := byVariant[b.Variant]
		if vt == nil {
			vt = &tally{}
			byVariant[b.Variant] = vt
		}
		var one tally
		one.measure(t, fmt.Sprintf("%s/%s pid %d", rep.Arch, b.Variant, rep.PID), got, want)
		vt.merge(one)
		all.merge(one)
	}
	var vs []string
	for v := range byVariant {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	for _, v := range vs {
		t.Logf("%-22s %s", v, byVariant[v])
	}
	t.Logf("%-22s %s", "all", all)
}

// measure counts the crashed thread's frames against gdb's: equal, wrong
// (by method and trust; an error at high or medium trust) and beyond
// gdb's last.
func (t2 *tally) measure(t *testing.T, name string, got *report.Report, want *fixture.Trace) {
	t.Helper()
	ct := got.Crashed()
	var wt *fixture.Thread
	for i := range want.Threads {
		if want.Threads[i].Crashed {
			wt = &want.Threads[i]
		}
	}
	if ct == nil || wt == nil {
		t.Errorf("%s: no crashed thread", name)
		return
	}
	var g []string
	for _, f := range wt.Frames {
		if f.Error == "" {
			g = append(g, f.PC)
		}
	}
	g = g[:fixture.Outermost(g)] // gdb's guesses past the outermost frame
	t2.gdb += len(g)
	var line []string
	for i, f := range ct.Frames {
		key := f.Method + "/" + f.Trust
		switch {
		case i >= len(g):
			t2.beyond++
			line = append(line, "+"+key)
		case f.PC.String() == g[i]:
			t2.equal++
			t2.addEqual(key)
		default:
			t2.add(key)
			line = append(line, fmt.Sprintf("#%d %s!=%s %s", i, f.PC, g[i], key))
			if f.Trust == "high" || f.Trust == "medium" {
				t.Errorf("%s: frame %d %s is %s, gdb says %s", name, i, key, f.PC, g[i])
			}
		}
	}
	if len(line) > 0 || len(ct.Frames) < len(g) {
		t.Logf("%s: %d/%d frames, stop %s (%.300s) %s", name, min(len(ct.Frames), len(g)), len(g), ct.StopReason, ct.StopDetail, strings.Join(line, " "))
	}
}

// againstChain counts a crash whose gdb trace strays from the program's
// known call structure, against that structure, as the matrix does: a
// wrong frame at high or medium trust fails. gdb strays on qemu-arm's
// cores of killhandler: qemu 7.2 leaves uc_flags 0 in a non-RT signal
// frame where the kernel writes its magic 0x5ac3c35a, so gdb reads the
// interrupted registers at the pre-2.6.18 layout's offsets and names
// frame 5 0x0.
func (t2 *tally) againstChain(t *testing.T, b fixture.Binary, name string, got *report.Report, scenario string) {
	t.Helper()
	th := got.Crashed()
	if th == nil {
		t.Errorf("%s: no crashed thread", name)
		return
	}
	var fig fixture.Figures
	if fig.AddChain(name, got, b.FrameNames(t, got, th), fixture.KnownChains[scenario]) > 0 {
		t.Errorf("%s: wrong trusted frames against the known chain: %q", name, fig.Cases)
	}
	t2.chains++
	t2.gdb += fig.Want
	t2.equal += fig.Equal
	t2.beyond += fig.Beyond
	for k, n := range fig.ByMeth {
		for ; n > 0; n-- {
			t2.add(k)
		}
	}
	t.Logf("%s: gdb strays from the known chain; against it: %d/%d equal, wrong %v", name, fig.Equal, fig.Want, fig.ByMeth)
}

// buildNoTables builds crash.c without unwind tables for arch, dynamic,
// at -O0 -fno-omit-frame-pointer and -O2 -fomit-frame-pointer, stripped
// as Yocto strips, in the layout internal/fixture expects.
func buildNoTables(t *testing.T, arch string) (string, []string) {
	cross := map[string]string{"aarch64": "aarch64-linux-gnu-", "x86_64": ""}[arch]
	if _, err := exec.LookPath(cross + "gcc"); err != nil {
		t.Skip(err)
	}
	dir := filepath.Join(t.TempDir(), arch)
	src := filepath.Join(fixture.Root(), "testdata", "crash", "crash.c")
	var variants []string
	for v, flags := range map[string]string{"O0-dynamic-notables": "-O0 -fno-omit-frame-pointer", "O2-dynamic-notables": "-O2 -fomit-frame-pointer"} {
		d := filepath.Join(dir, v)
		if err := os.MkdirAll(filepath.Join(d, "stripped"), 0o755); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-g"}, strings.Fields(flags)...)
		args = append(args, "-fno-unwind-tables", "-fno-asynchronous-unwind-tables", "-pthread", "-Wl,--build-id", "-o", filepath.Join(d, "crash"), src)
		testutil.Run(t, cross+"gcc", args...)
		testutil.Run(t, cross+"strip", "--remove-section=.comment", "--remove-section=.note", "-o", filepath.Join(d, "stripped", "crash"), filepath.Join(d, "crash"))
		variants = append(variants, v)
	}
	sort.Strings(variants)
	return dir, variants
}

type tally struct {
	gdb, equal, beyond int
	chains             int // crashes counted against the known chain
	wrong, right       map[string]int
}

func (t *tally) addEqual(k string) {
	if t.right == nil {
		t.right = map[string]int{}
	}
	t.right[k]++
}

func (t *tally) add(k string) {
	if t.wrong == nil {
		t.wrong = map[string]int{}
	}
	t.wrong[k]++
}

func (t *tally) merge(o tally) {
	t.gdb += o.gdb
	t.equal += o.equal
	t.beyond += o.beyond
	t.chains += o.chains
	for k, v := range o.wrong {
		t.add(k)
		t.wrong[k] += v - 1
	}
	for k, v := range o.right {
		t.addEqual(k)
		t.right[k] += v - 1
	}
}

func (t tally) String() string {
	var ks []string
	n := 0
	for k, v := range t.wrong {
		ks = append(ks, fmt.Sprintf("%s:%d", k, v))
		n += v
	}
	sort.Strings(ks)
	var rs []string
	for k, v := range t.right {
		rs = append(rs, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(rs)
	s := fmt.Sprintf("equal %d/%d (%.1f%%) %v, wrong %d %v, beyond gdb %d", t.equal, t.gdb, 100*float64(t.equal)/float64(max(t.gdb, 1)), rs, n, ks, t.beyond)
	if t.chains > 0 {
		s += fmt.Sprintf(" (%d crashes against the known chain)", t.chains)
	}
	return s
}
