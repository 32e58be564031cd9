package handler

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/labcore"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestWildAgainstGDB measures the unwinder on programs nobody here built or
// chose the crash point of: Debian bookworm's own arm64, armhf (Thumb-2)
// and amd64 packages and trixie's riscv64 ones, stripped as shipped
// (scripts/wild-get.sh), each run on a CPU-heavy load (under qemu-user;
// riscv64 in a guest kernel, labcore.WildCores) and killed after a random
// delay, so that the PC lands anywhere in the program, its libraries or
// the dynamic loader. gdb walks the same core with the same binaries and
// libc6-dbg. Per program and arch it prints, over every thread, the
// frames equal to gdb's, the wrong ones (another PC at the same depth) by
// method and trust, those missing (the trace ends earlier) and those past
// gdb's last; it fails on any wrong frame at high or medium trust. Opt-in (UNWOUND_WILD=1): it
// fetches packages and makes cores, both cached under
// ~/.cache/unwound/wild; UNWOUND_WILD_CORES sets the cores per load
// (default 2).
func TestWildAgainstGDB(t *testing.T) {
	if os.Getenv("UNWOUND_WILD") == "" {
		t.Skip("set UNWOUND_WILD=1 to measure the unwinder on Debian's own binaries against gdb")
	}
	testutil.Need(t, "gdb-multiarch", "apt-get", "dpkg-deb")
	n := 2
	if s := os.Getenv("UNWOUND_WILD_CORES"); s != "" {
		fmt.Sscan(s, &n)
	}
	rows := map[string]*fixture.Figures{}
	extra := map[string]*wildExtra{}
	for _, arch := range []string{"aarch64", "arm", "riscv64", "x86_64"} {
		t.Run(arch, func(t *testing.T) {
			if arch != "riscv64" {
				testutil.Need(t, "qemu-"+arch)
			}
			dir := fixture.WildPackages(t, arch)
			root := filepath.Join(dir, "root")
			if arch == "riscv64" {
				// qemu-user writes no riscv64 cores: a guest kernel does.
				testutil.Need(t, "qemu-system-riscv64")
				labcore.WildCores(t, arch, dir, n)
			}
			for _, l := range fixture.WildLoads {
				for i := 0; i < n; i++ {
					name := fmt.Sprintf("%s-%d", l.Name, i)
					core := fixture.WildCorePath(t, arch, dir, l, i)
					if arch != "riscv64" {
						core = fixture.WildCore(t, arch, dir, l, i)
					} else if _, err := os.Stat(core); err != nil {
						core = ""
					}
					if core == "" {
						continue
					}
					b := fixture.Binary{Arch: arch, Dir: root, Prog: l.In(root), DebugDir: filepath.Join(dir, "debug")}
					want, err := fixture.TryOracle(t, b, core, root)
					if err != nil {
						t.Logf("%s: no oracle: %.300v", name, err)
						continue
					}
					got := offlineReport(t, OfflineOptions{CoreFile: core, Sysroot: root, Exe: b.Unstripped()})
					fig := rows[arch+"/"+l.Name]
					if fig == nil {
						fig = &fixture.Figures{}
						rows[arch+"/"+l.Name] = fig
					}
					ex := extra[arch+"/"+l.Name]
					if ex == nil {
						ex = &wildExtra{past: map[string]int{}}
						extra[arch+"/"+l.Name] = ex
					}
					if wildCount(t, fig, ex, name, core, b.DebugDir, got, want) > 0 {
						t.Errorf("%s (%s): a wrong frame at high or medium trust", name, core)
					}
				}
			}
		})
	}
	wildTables(t, rows, extra)
}

// wildExtra are the figures of a row that fixture.Figures has not: the
// threads where gdb guessed (wildCount), and the handler's frames past
// gdb's last by trust, which no oracle checks.
type wildExtra struct {
	disputed int
	past     map[string]int
}

// wildCount counts every thread of got against gdb's into fig (the
// crashed thread as Figures.AddGDB does, the others the same way: a
// crash is counted once), logs the threads that differ, and returns how
// many frames are wrong at high or medium trust.
//
// gdb's frames are believed up to the first depth where they differ from
// the handler's and gdb stepped there without unwind tables: the handler
// used none either (its method is a heuristic) and libc6-dbg has no
// debug file for the callee's module. Debian builds armhf C code without
// tables and ships no symbols, so gdb then guesses from the stale link
// register or a prologue it cannot find; its trace is cut there, like
// at its own "Backtrace stopped", and the cut is logged (disputed).
func wildCount(t *testing.T, fig *fixture.Figures, ex *wildExtra, name, core, debugDir string, got *report.Report, want *fixture.Trace) (trusted int) {
	t.Helper()
	pairs, missing := fixture.ThreadPairs(got, want)
	if len(missing) > 0 {
		t.Logf("%s: threads %v missing", name, missing)
	}
	for i, p := range pairs {
		th, wt := p.Got, p.Want
		if d := gdbGuess(th, wt, got.Modules, debugDir); d > 0 {
			t.Logf("%s thread %d: disputed from #%d: gdb %s, ours %s by %s/%s, both without tables (%s)",
				name, wt.TID, d, wt.Frames[d].PC, th.Frames[d].PC, th.Frames[d].Method, fixture.Trust(th.Frames[d]), core)
			ex.disputed++
			wt.Frames = wt.Frames[:d:d]
		}
		var w []string
		for _, f := range wt.Frames {
			if f.Error == "" {
				w = append(w, f.PC)
			}
		}
		for _, f := range th.Frames[min(fixture.Outermost(w), len(th.Frames)):] {
			ex.past[fixture.Trust(f)]++
		}
		one := *got
		th.Crashed, wt.Crashed = true, true
		one.Threads = []report.Thread{th}
		before := len(fig.Cases)
		trusted += fig.AddGDB(name, &one, &fixture.Trace{Threads: []fixture.Thread{wt}})
		if i > 0 {
			fig.Crashes-- // a crash, not a thread
		}
		if len(fig.Cases) > before || len(th.Frames) < fixture.Outermost(w) { // wrong or missing frames
			var g []string
			for _, f := range th.Frames {
				g = append(g, f.PC.String())
			}
			t.Logf("%s thread %d (%s; stop %s: %.200s):\n%s", name, wt.TID, core, th.StopReason, th.StopDetail, fixture.Diff(g, w, th, wt))
		}
	}
	return trusted
}

// wildTables logs the figures per program and arch (fixture.Table),
// each arch's total, and the frames missing: gdb's frames at depths the
// trace does not reach; and the threads where gdb's trace was cut since it
// guessed (wildCount).
func wildTables(t *testing.T, rows map[string]*fixture.Figures, extra map[string]*wildExtra) {
	all := map[string]*fixture.Figures{}
	var names []string
	for name, f := range rows {
		arch, _, _ := strings.Cut(name, "/")
		if all[arch+"/= all"] == nil {
			all[arch+"/= all"] = &fixture.Figures{}
		}
		all[arch+"/= all"].Add(name+"/", f)
		if extra[arch+"/= all"] == nil {
			extra[arch+"/= all"] = &wildExtra{past: map[string]int{}}
		}
		extra[arch+"/= all"].disputed += extra[name].disputed
		for k, v := range extra[name].past {
			extra[arch+"/= all"].past[k] += v
		}
		names = append(names, name)
	}
	for name, f := range all {
		rows[name] = f
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	fixture.Table(&b, rows)
	b.WriteString("\n| arch/program | gdb frames | equal | wrong | missing | past gdb's last: high/medium/low | threads where gdb guessed |\n|---|---|---|---|---|---|---|\n")
	for _, name := range names {
		f := rows[name]
		wrong := 0
		for _, v := range f.Wrong {
			wrong += v
		}
		ex := extra[name]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d: %d/%d/%d | %d |\n", name, f.Want, f.Equal, wrong, f.Want-f.Equal-wrong,
			f.Beyond, ex.past["high"], ex.past["medium"], ex.past["low"], ex.disputed)
	}
	t.Logf("Debian's binaries against gdb, every thread:\n%s", b.String())
}

// gdbGuess is the depth of th's first frame that differs from gdb's
// where gdb had no unwind table for the frame below either (wildCount),
// 0 when gdb is believed all along.
func gdbGuess(th report.Thread, wt fixture.Thread, mods []report.Module, debugDir string) int {
	for i := 1; i < len(th.Frames) && i < len(wt.Frames); i++ {
		if wt.Frames[i].Error != "" {
			return 0
		}
		if th.Frames[i].PC.String() == wt.Frames[i].PC {
			continue
		}
		switch th.Frames[i].Method {
		case "cfi", "ehabi", "signal", "context":
			return 0 // the callee has a table, which gdb reads too
		}
		if m := th.Frames[i-1].Module; m >= 0 && m < len(mods) && len(mods[m].BuildID) > 2 {
			id := mods[m].BuildID
			if _, err := os.Stat(filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")); err == nil {
				return 0 // gdb reads the callee's .debug_frame
			}
		}
		return i
	}
	return 0
}
