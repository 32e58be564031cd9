package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// The core lab's tests: the crash matrix on the minimal and Debian
// kernels against gdb (TestLab, TestLabDebian, TestLabKernel7), its size
// (TestDefaultCases) and issue 17's MiniDebugInfo matrix on real kernels'
// cores (TestLabMiniDebugInfo).

// TestLab boots every architecture's minimal kernel with the real
// unwound-handler installed through its own --core-pattern line, crashes
// every fixture, and ships out the reports and (save_core_dir) the full
// cores. Each report must come from the kernel's pipe in live mode, and
// equal gdb's walk of the same core (see checkCrash for what "equal" means
// per build variant).
func TestLab(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU guests")
	}
	// UNWOUND_LAB_KERNEL=debian runs the whole matrix on Debian's
	// packaged kernels instead, where Debian has one.
	debian := os.Getenv("UNWOUND_LAB_KERNEL") == "debian"
	rows := map[string]*fixture.Figures{}
	for _, arch := range Arches {
		arch := arch
		t.Run(arch, func(t *testing.T) {
			if _, ok := DebianFlavours[arch]; debian && !ok {
				t.Skipf("no Debian kernel for %s", arch)
			}
			addRows(rows, arch, labTest(t, &Lab{KernelArch: arch, Debian: debian, Cases: DefaultCases(arch)}))
		})
	}
	// A 32-bit ARM userland on the AArch64 kernel (COMPAT): the core is
	// ELFCLASS32/EM_ARM while the handler is an arm64 binary; the
	// architecture must come from the core, never from the machine.
	// Issue 25's shapes were seen there too (Thumb and A32).
	t.Run("arm-on-aarch64", func(t *testing.T) {
		cases := append(Matrix(nil, nil), Matrix([]string{"O2-dynamic", "O2-dynamic-marm"}, shapeScenarios())...)
		addRows(rows, "arm@aarch64", labTest(t, &Lab{KernelArch: "aarch64", Arch: "arm", Debian: debian, Cases: cases}))
	})
	labFamilyGate(t, rows)
}

// addRows keeps one guest's figures under its label (the programs' arch,
// and @kernel where the kernel's differs).
func addRows(all map[string]*fixture.Figures, label string, rows map[string]*fixture.Figures) {
	for name, f := range rows {
		_, variant, _ := strings.Cut(name, "/")
		all[label+"/"+variant] = f
	}
}

// labFamilyGate prints the lab's figures per family (glibc, musl, lld,
// mold, static) over every guest, and fails on issue 25's bounds: a
// crash with a wrong frame at high or medium trust (each crash's own
// test fails too), or more than 2% of a family's crashes with a wrong
// low-trust frame, unless UNWOUND_LAB_VARIANTS or _SCENARIOS picked a
// part of the matrix.
func labFamilyGate(t *testing.T, rows map[string]*fixture.Figures) {
	if len(rows) == 0 {
		return
	}
	var b strings.Builder
	fixture.FamilyTables(&b, rows)
	t.Logf("the lab's crashes counted against gdb, by family:\n%s", b.String())
	if p := os.Getenv("UNWOUND_FIGURES"); p != "" {
		if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "lab, by family\n%s\n", b.String())
			f.Close()
		}
	}
	whole := os.Getenv("UNWOUND_LAB_VARIANTS") == "" && os.Getenv("UNWOUND_LAB_SCENARIOS") == ""
	fixture.FamilyGate(t, rows, whole)
}

// TestLabDebian runs the real-pipe scenarios on Debian's packaged kernels
// (the lab's second flavour: arm64 and armmp; amd64 boots for over a minute
// under TCG, so it runs only with UNWOUND_LAB_DEBIAN=all). The virtio
// console is a module there: the guest loads it from the initramfs.
func TestLabDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU guests")
	}
	arches := []string{"aarch64", "arm"}
	if os.Getenv("UNWOUND_LAB_DEBIAN") == "all" {
		arches = append(arches, "x86_64")
	}
	for _, arch := range arches {
		arch := arch
		t.Run(arch, func(t *testing.T) {
			labTest(t, &Lab{KernelArch: arch, Debian: true, Cases: Matrix([]string{"O2-dynamic"}, nil)})
		})
	}
}

// TestLabKernel7 runs the lab's scenarios on a minimal Linux 7.x kernel,
// built like the 6.1 ones from Debian unstable's newest linux-source-7.x
// (kernel/build.sh with UNWOUND_KERNEL=7), in the kernel modes issue 28
// adds: pipe with --pidfd=%F, and the @@ coredump socket. make test runs
// aarch64 with the base variants; UNWOUND_LAB_KERNEL7=all runs every
// architecture with the lab's whole matrix (DefaultCases), =off skips it.
//
// UNWOUND_LAB_MODES (comma-separated: pidfd, socket, pipe) picks the
// modes; labModes7 when unset. The socket mode needs the handler's
// --serve-coredump-socket and skips, saying so, without it.
func TestLabKernel7(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU guests")
	}
	if os.Getenv("UNWOUND_LAB_KERNEL7") == "off" {
		// The first run builds one more kernel (docs/qemu-lab.md).
		t.Skip("UNWOUND_LAB_KERNEL7=off")
	}
	all := os.Getenv("UNWOUND_LAB_KERNEL7") == "all"
	arches := []string{"aarch64"}
	if all {
		arches = Arches
	}
	modes := os.Getenv("UNWOUND_LAB_MODES")
	if modes == "" {
		modes = labModes7
	}
	for _, arch := range arches {
		arch := arch
		for _, mode := range strings.Split(modes, ",") {
			mode := mode
			t.Run(arch+"/"+mode, func(t *testing.T) {
				cases := Matrix(nil, nil)
				if all {
					cases = DefaultCases(arch)
				}
				l := &Lab{KernelArch: arch, Series: "7", Mode: mode, Cases: cases}
				rows := labTest(t, l)
				if len(rows) > 0 {
					labFamilyGate(t, rows)
				}
			})
		}
	}
}

// labModes7 are TestLabKernel7's modes by default: the @@ coredump socket
// served by unwound-handler --serve-coredump-socket, which issue 28 asks
// of make test. The pipe with the kernel's pidfd (pidfd) costs another
// boot and gdb pass (about 2.5 minutes): UNWOUND_LAB_MODES=pidfd,socket.
const labModes7 = "socket"

// labTest runs one guest and checks its crashes; it returns the figures
// of those counted (the matrix's variants, issue 25's shapes) by
// arch/variant.
func labTest(t *testing.T, l *Lab) map[string]*fixture.Figures {
	arch := l.Arch
	if arch == "" {
		arch = l.KernelArch
	}
	l.Dir = t.TempDir()
	if d := os.Getenv("UNWOUND_LAB_KEEP"); d != "" {
		// Keep the guest's files (cores, reports, the host mirror) to
		// look at a failure by hand.
		l.Dir = filepath.Join(d, fmt.Sprintf("%s-%s-debian=%v", l.KernelArch, arch, l.Debian))
		if l.Series != "" || l.Mode != "" {
			l.Dir += fmt.Sprintf("-linux%s-%s", l.Series, l.Mode)
		}
		os.RemoveAll(l.Dir)
		os.MkdirAll(l.Dir, 0o755)
	}
	l.Progress = t.Logf
	// UNWOUND_LAB_VARIANTS and UNWOUND_LAB_SCENARIOS (comma-separated)
	// narrow the matrix for a run by hand.
	l.Cases = narrow(l.Cases, os.Getenv("UNWOUND_LAB_VARIANTS"), os.Getenv("UNWOUND_LAB_SCENARIOS"))
	if len(l.Cases) == 0 {
		t.Skip("no cases left by UNWOUND_LAB_VARIANTS/UNWOUND_LAB_SCENARIOS")
	}
	rows := map[string]*fixture.Figures{}
	res, err := l.Run(context.Background())
	if errors.Is(err, ErrNoSocketServer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	checkMode(t, l, res)
	t.Logf("%s on %s: %d crashes, boot to exit %v", arch, res.Kernel, len(res.Crashes), res.Duration.Round(time.Millisecond))
	if os.Getenv("UNWOUND_LAB_KEEP") != "" {
		// Which crash each kept core is, for measuring them again
		// offline (handler.TestHeuristicsAgainstGDB with
		// UNWOUND_HEURISTICS_LAB).
		var kept []fixture.LabCrash
		for _, c := range res.Crashes {
			kept = append(kept, fixture.LabCrash{PID: c.Report.PID, Arch: arch, Variant: c.Variant, Prog: c.Prog, Scenario: c.Scenario, Core: c.Core})
		}
		if js, err := json.Marshal(kept); err == nil {
			os.WriteFile(filepath.Join(l.Dir, fixture.LabCrashesFile), js, 0o644)
		}
	}
	start := time.Now()
	for _, c := range res.Crashes {
		c := c
		if isMatrix(c.Variant) || isShape(c.Scenario) {
			fig := rows[arch+"/"+c.Variant]
			if fig == nil {
				fig = &fixture.Figures{}
				rows[arch+"/"+c.Variant] = fig
			}
			t.Run(c.Variant+"/"+c.Scenario+"/"+strconv.Itoa(c.Report.PID), func(t *testing.T) { checkMatrixCrash(t, arch, res, c, fig) })
			continue
		}
		t.Run(c.Variant+"/"+c.Scenario+"/"+strconv.Itoa(c.Report.PID), func(t *testing.T) { checkCrash(t, arch, res, c) })
	}
	if len(rows) > 0 {
		var b strings.Builder
		fixture.Table(&b, rows)
		t.Logf("%s on %s, live reports: crashed-thread frames against gdb (or the known call chain where gdb fails):\n%s", arch, res.Kernel, b.String())
		if p := os.Getenv("UNWOUND_FIGURES"); p != "" {
			if f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintf(f, "%s on %s\n%s\n", arch, res.Kernel, b.String())
				f.Close()
			}
		}
	}
	if arch == "arm" {
		sameReportOnArm64(t, l, res)
	}
	t.Logf("%s: gdb comparisons %v", arch, time.Since(start).Round(time.Millisecond))
	return rows
}

// checkMode checks that the crashes reached the handler the way l.Mode
// says. In the pidfd and socket modes the guest's console shows the
// kernel log at info level, where the handler logs one line per crash;
// it must say "(pidfd)" for every crash: /proc/<pid> was checked through
// the pidfd %F or SO_PEERPIDFD gave. In the socket mode the guest also
// waited for the server's socket before it set the pattern.
func checkMode(t *testing.T, l *Lab, res *LabResult) {
	if l.Mode != ModePidfd && l.Mode != ModeSocket {
		return
	}
	if l.Mode == ModePidfd && !strings.Contains(res.Console, "--pidfd=%F") {
		t.Errorf("the console shows no core_pattern line with --pidfd=%%F")
	}
	via := map[int]string{}
	line := regexp.MustCompile(`unwound-handler\[\d+\]: pid (\d+) \(.*, (\w+) mode( \(pidfd\))?, frozen`)
	for _, m := range line.FindAllStringSubmatch(res.Console, -1) {
		pid, _ := strconv.Atoi(m[1])
		via[pid] = m[2] + m[3]
	}
	for _, c := range res.Crashes {
		if v := via[c.Report.PID]; v != "live (pidfd)" {
			t.Errorf("pid %d (%s/%s): the handler's line says %q, want \"live (pidfd)\"", c.Report.PID, c.Variant, c.Scenario, v)
		}
		for _, e := range c.Report.Errors {
			if strings.Contains(e, "no longer the crashed process") {
				t.Errorf("pid %d: %s", c.Report.PID, e)
			}
		}
	}
}

// checkCrash compares one crash's live report, and the offline unwind of
// its saved core, with gdb on the same core:
//
//   - binaries with unwind tables: every thread's PCs equal gdb's;
//     riscv64 may go past gdb's outermost frame by frame pointer;
//   - stripped static ARM/RISC-V binaries (libc.a functions without tables
//     and, stripped, without symbols) and binaries built without unwind
//     tables: every thread is a prefix of gdb's trace, and where it is
//     shorter it stops with a reason at a frame whose function has no
//     unwind table entry in the file the handler read (tablesJustify).
//
// Where the comparison is exact, the crashed thread must also follow the
// program's known call structure (fixture.KnownChains), signal frames
// included. The crash matrix's variants are counted instead (figures):
// a trace may be short, never wrong at high or medium trust.
func checkCrash(t *testing.T, arch string, res *LabResult, c LabCrash) {
	rep := c.Report
	b := checkLiveOffline(t, arch, res, c, c.Variant+"/"+c.Prog+" "+c.Scenario+": ")
	if arch == "arm" && c.Scenario == "recursion" {
		// gdb-multiarch 13 dies (SIGSEGV) walking these cores. The
		// live report must hold the whole 100,000-frame walk.
		if th := rep.Crashed(); th == nil || th.Elided < 10000 {
			t.Errorf("arm recursion: %v", th)
		}
		return
	}
	want := fixture.OracleSysroot(t, b, c.Core, res.HostRoot)
	noTables := strings.HasSuffix(c.Variant, "-notables")
	switch {
	case noTables || arch != "x86_64" && arch != "aarch64" && strings.Contains(c.Variant, "-static"):
		fixture.ComparePrefix(t, rep, want)
		tablesJustify(t, res, rep, want)
	case arch == "riscv64":
		fixture.CompareBeyondGDB(t, rep, want)
		knownChain(t, b, rep, c.Scenario)
	default:
		fixture.CompareReport(t, rep, want)
		knownChain(t, b, rep, c.Scenario)
	}
}

// checkLiveOffline checks what every lab crash holds: a live report of
// arch, its core saved, and the same trace from that core offline, read
// with the host's copy of the guest's files. It returns the crash's
// fixture binary. prefix starts the first error, naming the crash.
func checkLiveOffline(t *testing.T, arch string, res *LabResult, c LabCrash, prefix string) fixture.Binary {
	t.Helper()
	rep := c.Report
	if rep.Handler.Mode != "live" || rep.Arch != arch {
		t.Errorf("%smode %s arch %s errors %v", prefix, rep.Handler.Mode, rep.Arch, rep.Errors)
	}
	if c.Core == "" {
		t.Fatalf("no saved core for pid %d", rep.PID)
	}
	off, err := handler.Offline(handler.OfflineOptions{CoreFile: c.Core, Sysroot: res.HostRoot, Config: config.Default(), Log: handler.NewLogger(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	if pcsOf(rep) != pcsOf(off) && !cutByFreeze(rep, off) {
		t.Errorf("live and offline traces differ:\nlive:\n%s\noffline:\n%s", pcsOf(rep), pcsOf(off))
	}
	return fixture.Binary{Arch: arch, Variant: c.Variant, Prog: c.Prog, Dir: res.Fixtures}
}

// cutByFreeze says the live and offline traces differ only where the
// freeze budget released the process before a deep walk ended: that
// thread's live walk says so (memory_unreadable) and is shorter, and the
// frames it kept before the elision are offline's first frames; every
// other thread is the same. On a slow guest a 100,000-frame recursion
// outlasts the budget.
func cutByFreeze(live, off *report.Report) bool {
	if len(live.Threads) != len(off.Threads) {
		return false
	}
	for i, lt := range live.Threads {
		ot := off.Threads[i]
		if pcsOf(&report.Report{Threads: []report.Thread{lt}}) == pcsOf(&report.Report{Threads: []report.Thread{ot}}) {
			continue
		}
		if lt.TID != ot.TID || lt.StopReason != unwind.StopMemory || !strings.Contains(lt.StopDetail, "freeze budget") ||
			len(lt.Frames)+lt.Elided >= len(ot.Frames)+ot.Elided {
			return false
		}
		head := min(len(lt.Frames), len(ot.Frames)) / 2
		for j := 0; j < head; j++ {
			if lt.Frames[j].PC != ot.Frames[j].PC {
				return false
			}
		}
	}
	return true
}

// checkMatrixCrash counts one crash of a matrix variant into fig: the
// live report against gdb's walk of the saved core, or against the known
// call chain where gdb's walk does not follow it (musl's libc has no
// tables, and gdb has no fallback there). The live and offline unwinds
// must agree, and no frame may be wrong at high or medium trust.
func checkMatrixCrash(t *testing.T, arch string, res *LabResult, c LabCrash, fig *fixture.Figures) {
	rep := c.Report
	b := checkLiveOffline(t, arch, res, c, "")
	want, err := fixture.TryOracle(t, b, c.Core, res.HostRoot)
	chain := fixture.KnownChains[c.Scenario]
	switch {
	case errors.Is(err, fixture.ErrGDBTimeout) && chain == nil:
		t.Skip(err)
	case err != nil && !errors.Is(err, fixture.ErrGDBTimeout):
		t.Fatal(err)
	}
	before, trusted := len(fig.Cases), 0
	name := c.Variant + "/" + c.Scenario
	if want != nil && fixture.GDBFollows(want, c.Scenario) {
		trusted = fig.AddGDB(name, rep, want)
	} else {
		th := rep.Crashed()
		if th == nil {
			t.Fatal("no crashed thread")
		}
		names := exeNames(t, b, rep, th)
		t.Logf("gdb does not follow %v: counted against it: %v (stop %s: %s)", chain, names, th.StopReason, th.StopDetail)
		trusted = fig.AddChain(name, rep, names, chain)
	}
	for _, w := range fig.Cases[before:] {
		t.Logf("wrong frame: %s", w)
	}
	known, isKnown := fixture.KnownWrong[arch+"/"+c.Variant+"/"+c.Scenario]
	switch {
	case trusted > 0 && isKnown:
		t.Logf("%d wrong frames at high or medium trust, known: %s", trusted, known)
	case trusted > 0:
		t.Errorf("wrong frames at high or medium trust:\n%s", pcsOf(rep))
	case isKnown:
		t.Errorf("no wrong frame any more: remove this crash from fixture.KnownWrong")
	}
}

func knownChain(t *testing.T, b fixture.Binary, rep *report.Report, scenario string) {
	t.Helper()
	chain, ok := fixture.KnownChains[scenario]
	if !ok {
		return
	}
	th := rep.Crashed()
	if th == nil {
		t.Error("no crashed thread")
		return
	}
	names := exeNames(t, b, rep, th)
	if !fixture.Subsequence(names, chain) {
		t.Errorf("crashed thread %v does not follow %v", names, chain)
	}
	if scenario == "nullfn" && (len(th.Frames) == 0 || th.Frames[0].PC != 0) {
		t.Errorf("nullfn: frame 0 is not PC 0: %v", names)
	}
}

// exeNames names the frames of th by the symbols of the program's
// unstripped build: "?" for a frame outside the program.
func exeNames(t *testing.T, b fixture.Binary, rep *report.Report, th *report.Thread) []string {
	t.Helper()
	syms, err := fixture.LoadSymbols(b.Unstripped())
	if err != nil {
		t.Fatalf("symbols: %v", err)
	}
	mod := -1
	for i, m := range rep.Modules {
		if m.Path == rep.Exe {
			mod = i
		}
	}
	return syms.Names(rep, th, mod)
}

// tablesJustify checks, for a trace shorter than gdb's, that the handler
// stopped for want of unwind information: its stop reason says so and
// names the module. That is the line between "matches gdb where the binary
// has unwind tables" and a wrong stop.
func tablesJustify(t *testing.T, res *LabResult, rep *report.Report, want *fixture.Trace) {
	t.Helper()
	byTID := map[int]fixture.Thread{}
	for _, th := range want.Threads {
		byTID[th.TID] = th
	}
	for _, th := range rep.Threads {
		g := 0
		for _, f := range byTID[th.TID].Frames {
			if f.Error == "" {
				g++
			}
		}
		if len(th.Frames)+th.Elided >= g {
			continue
		}
		if fixture.FirstLowTrust(th) >= 0 {
			// The heuristics went past the frame without a table: the
			// comparison with gdb ended at the first guess.
			continue
		}
		last := th.Frames[len(th.Frames)-1]
		// On ARM the linker covers code without tables with
		// EXIDX_CANTUNWIND entries, which the handler treats as the
		// outermost frame (as gdb does at _start): stop end_of_stack, the
		// detail naming the module and the marker.
		cantUnwind := th.StopReason == "end_of_stack" && strings.Contains(th.StopDetail, "EXIDX_CANTUNWIND")
		if th.StopReason != "no_unwind_info" && !cantUnwind {
			t.Errorf("thread %d: %d of gdb's %d frames, stop %s (%s): want no_unwind_info or EXIDX_CANTUNWIND", th.TID, len(th.Frames), g, th.StopReason, th.StopDetail)
			continue
		}
		if last.Module >= 0 && last.Module < len(rep.Modules) && !strings.Contains(th.StopDetail, filepath.Base(rep.Modules[last.Module].Path)) {
			t.Errorf("thread %d: stop detail %q does not name %s", th.TID, th.StopDetail, rep.Modules[last.Module].Path)
		}
	}
}

// sameReportOnArm64 unwinds the 32-bit ARM cores again with the arm64
// build of unwound-handler, run under qemu-aarch64 on this host in
// --core-file mode: the traces and modules must equal the host build's.
func sameReportOnArm64(t *testing.T, l *Lab, res *LabResult) {
	if _, err := exec.LookPath("qemu-aarch64"); err != nil {
		t.Log("qemu-aarch64 not installed: the arm64 handler's offline unwind is not compared")
		return
	}
	bin := goBuild(t, "github.com/unwound-dev/unwound/cmd/unwound-handler", "aarch64", filepath.Join(l.Dir, "unwound-handler-arm64"))
	// One crash per variant: the signal-handler one where there is one.
	pick := map[string]LabCrash{}
	for _, c := range res.Crashes {
		if p, ok := pick[c.Variant]; c.Scenario != "recursion" && (!ok || c.Scenario == "sighandler" && p.Scenario != "sighandler") {
			pick[c.Variant] = c
		}
	}
	n := 0
	for _, c := range pick {
		n++
		host, err := handler.Offline(handler.OfflineOptions{CoreFile: c.Core, Sysroot: res.HostRoot, Config: config.Default(), Log: handler.NewLogger(io.Discard)})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("qemu-aarch64", bin, "--core-file", c.Core, "--sysroot", res.HostRoot, "--print-json")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("arm64 handler on %s: %v\n%s", c.Core, err, stderr.Bytes())
		}
		var arm64 report.Report
		if err := json.Unmarshal(out, &arm64); err != nil {
			t.Fatalf("arm64 handler output: %v", err)
		}
		if a, b := pcsOf(host)+modulesOf(host), pcsOf(&arm64)+modulesOf(&arm64); a != b {
			t.Errorf("%s/%s: amd64 and arm64 handlers differ:\n%s\n%s", c.Variant, c.Scenario, a, b)
		}
	}
	t.Logf("%d ARM cores: the arm64 handler (under qemu-aarch64) and the amd64 one give the same traces", n)
}

func narrow(cases []Case, variants, scenarios string) []Case {
	keep := func(list, s string) bool {
		return list == "" || strings.Contains(","+list+",", ","+s+",")
	}
	var out []Case
	for _, c := range cases {
		if !keep(variants, c.Variant) {
			continue
		}
		var sc []string
		for _, s := range c.Scenarios {
			if keep(scenarios, s) {
				sc = append(sc, s)
			}
		}
		if len(sc) > 0 {
			out = append(out, Case{c.Variant, sc})
		}
	}
	return out
}

func modulesOf(r *report.Report) string {
	var b strings.Builder
	for _, m := range r.Modules {
		fmt.Fprintf(&b, "%s %s %v %v %v\n", m.Path, m.BuildID, m.Start, m.RuntimeOffset, m.CompiledOffset)
	}
	return b.String()
}

func pcsOf(r *report.Report) string {
	var b strings.Builder
	for _, th := range r.Threads {
		fmt.Fprintf(&b, "%d: ", th.TID)
		for _, f := range th.Frames {
			b.WriteString(f.PC.String() + "/" + f.Method + " ")
		}
		fmt.Fprintf(&b, "| %d %s\n", th.Elided, th.StopReason)
	}
	return b.String()
}

// TestDefaultCases pins the lab's matrix sizes: its run time in make test
// depends on them (docs/qemu-lab.md). The crash matrix's slice adds 11
// crashes per glibc variant and 10 per musl one (issue 25's 3 shapes
// among them), and issue 25's shapes with pltstub 4 per ShapeVariants
// variant.
func TestDefaultCases(t *testing.T) {
	if os.Getenv("UNWOUND_MATRIX") == "full" {
		t.Skip("UNWOUND_MATRIX=full: the whole crash matrix")
	}
	for arch, want := range map[string]int{"aarch64": 36 + 4 + 3*11 + 2*10, "x86_64": 36 + 4 + 4*11 + 2*10, "arm": 36 + 4*6 + 8*3 + 4*4 + 3*11 + 2*10, "riscv64": 36 + 4*3 + 2*4 + 2*11} {
		n := 0
		for _, c := range DefaultCases(arch) {
			n += len(c.Scenarios)
		}
		if n != want {
			t.Errorf("%s: %d crashes, want %d", arch, n, want)
		}
	}
}

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
