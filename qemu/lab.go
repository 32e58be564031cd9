package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/qemu/guest"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// Lab is one guest of the core lab: a kernel, the crash programs of one
// architecture (armhf programs may run on the AArch64 kernel), and the
// real unwound-handler installed through its own --core-pattern line with
// save_core_dir, so every crash gives a live report and the full core.
type Lab struct {
	KernelArch string // the machine and kernel
	Arch       string // the programs' architecture; KernelArch when empty
	// Debian boots Debian's packaged kernel instead of the minimal one,
	// loading the virtio console modules from the initramfs.
	Debian bool
	// Series is the minimal kernel's source: "" for the host's
	// linux-source-6.1, "7" for Debian unstable's newest linux-source-7.x
	// (KernelSeries).
	Series string
	// Mode is how a crash reaches the handler: ModePipe when empty.
	Mode string
	// Cases are the crashes, in order; Matrix(nil, nil) (every scenario
	// of fixture.Variants) when empty.
	Cases    []Case
	Dir      string // work directory: cores/, reports/, root/ (the host mirror)
	Timeout  time.Duration
	Progress func(format string, args ...any)
}

// The lab's kernel modes (docs/kernel-modes.md).
const (
	// ModePipe is the handler's own --core-pattern line, by pid.
	ModePipe = "pipe"
	// ModePidfd adds --pidfd=%F to that line (Linux 6.16+): the kernel
	// gives the handler a pidfd of the crashed process as fd 3.
	ModePidfd = "pidfd"
	// ModeSocket starts the handler's coredump socket server in the
	// guest (--serve-coredump-socket SocketPath) before the crashes and
	// sets core_pattern to "@@" SocketPath (Linux 6.17+).
	ModeSocket = "socket"
)

// SocketPath is where the lab's guest runs the coredump socket server.
const SocketPath = "/run/unwound/coredump.sock"

// ErrNoSocketServer is Run's error in ModeSocket when this tree's
// unwound-handler has no --serve-coredump-socket.
var ErrNoSocketServer = errors.New("unwound-handler has no --serve-coredump-socket (issue 28, part 2): the @@ mode is not run")

// SocketServerSupported reports whether this tree's unwound-handler has
// the --serve-coredump-socket flag, from its --help on this host (built
// into dir).
func SocketServerSupported(dir string) (bool, error) {
	bin, err := hostBuild("github.com/unwound-dev/unwound/cmd/unwound-handler", filepath.Join(dir, "unwound-handler-host"))
	if err != nil {
		return false, err
	}
	// --help exits non-zero with the flag package's usage on stderr.
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return strings.Contains(string(out), "serve-coredump-socket"), nil
}

// Case is a build variant of testdata/crash/build.sh and the scenarios to
// crash it with: crash.c's, and "throw" for crashxx.
type Case struct {
	Variant   string
	Scenarios []string
}

// Matrix crosses variants with scenarios: fixture.Variants and every
// scenario when nil.
func Matrix(variants, scenarios []string) []Case {
	if variants == nil {
		variants = fixture.Variants
	}
	if scenarios == nil {
		scenarios = append(append([]string(nil), fixture.Scenarios...), "throw")
	}
	var cs []Case
	for _, v := range variants {
		cs = append(cs, Case{v, scenarios})
	}
	return cs
}

// extraScenarios are crashed in the extra ARM variants with unwind tables
// (A32 code): every way into a frame the unwinder must cross, without the
// slow deep recursion and the C++ throw. noTablesScenarios are crashed in
// the variants without unwind tables, where the trace stops early: a plain
// call chain, a signal handler, a NULL function pointer.
var (
	extraScenarios    = []string{"nullwrite", "abort", "sighandler", "sigaltstack", "threads", "nullfn"}
	noTablesScenarios = []string{"nullwrite", "sighandler", "nullfn"}
)

// DefaultCases is the lab's matrix per architecture: the four base
// variants with every scenario and, on ARM and RISC-V, the extra variants
// of build.sh (-marm, -notables, -marm-notables) with fewer; issue 25's
// shapes (fixture.ShapeScenarios) in ShapeVariants; then the crash
// matrix's variants (fixture.MatrixVariants: its slice, or all of it with
// UNWOUND_MATRIX=full) with fixture.ScenariosOf and "throw". Run skips
// the matrix variants build.sh could not build here.
func DefaultCases(arch string) []Case {
	cs := Matrix(nil, nil)
	var marm, notables []string
	for _, v := range fixture.Variants {
		switch arch {
		case "arm":
			marm = append(marm, v+"-marm")
			notables = append(notables, v+"-notables", v+"-marm-notables")
		case "riscv64":
			notables = append(notables, v+"-notables")
		}
	}
	if len(marm) > 0 {
		cs = append(cs, Matrix(marm, extraScenarios)...)
	}
	if len(notables) > 0 {
		cs = append(cs, Matrix(notables, noTablesScenarios)...)
	}
	cs = append(cs, Matrix(ShapeVariants(arch), shapeScenarios())...)
	for _, v := range fixture.MatrixVariants(arch) {
		sc := fixture.ScenariosOf(arch, v)
		if !fixture.IsMusl(v) { // crashxx is not built against musl
			sc = append(append([]string(nil), sc...), "throw")
		}
		cs = append(cs, Case{v, sc})
	}
	return cs
}

// ShapeVariants are the base variants crashed with issue 25's shapes in
// the lab, counted as the matrix is (figures, not an exact comparison):
// GCC's defaults at -O2, dynamic, and on ARM and RISC-V the same without
// unwind tables (Thumb-2 and A32 on ARM), where deep recursion is walked
// by the heuristics alone.
func ShapeVariants(arch string) []string {
	switch arch {
	case "arm":
		return []string{"O2-dynamic", "O2-dynamic-marm", "O2-dynamic-notables", "O2-dynamic-marm-notables"}
	case "riscv64":
		return []string{"O2-dynamic", "O2-dynamic-notables"}
	}
	return []string{"O2-dynamic"}
}

// shapeScenarios are crashed in ShapeVariants: issue 25's shapes and,
// since those variants are all dynamic, a PC inside a PLT stub
// ("pltstub"; handler.TestPLTStubFrameZero covers the host's arches).
func shapeScenarios() []string {
	return append(append([]string(nil), fixture.ShapeScenarios...), "pltstub")
}

// isShape reports whether a scenario is one of issue 25's shapes, counted
// in the figures wherever it is crashed.
func isShape(scenario string) bool {
	for _, s := range shapeScenarios() {
		if s == scenario {
			return true
		}
	}
	return false
}

// isMatrix reports whether a variant is one of the crash matrix's
// (CC-LD-FLAGS-LINK[-musl]) rather than a base variant.
func isMatrix(variant string) bool {
	return strings.HasPrefix(variant, "gcc-") || strings.HasPrefix(variant, "clang-")
}

// LabCrash is one crash's outcome.
type LabCrash struct {
	Variant, Prog, Scenario string
	Report                  *report.Report
	ReportFile              string // the shipped .json.zst
	Core                    string // the full core save_core_dir kept
}

// LabResult is what a lab guest gave back.
type LabResult struct {
	Crashes  []LabCrash
	HostRoot string // the guest's file layout on the host: unstripped-equivalent libs, stripped programs
	Fixtures string // fixture directory of the programs (unstripped copies for gdb)
	Kernel   string // what booted
	Duration time.Duration
	Console  string
}

// Run builds the guest, boots it, crashes every scenario of every variant,
// collects the reports and cores (checksums verified) and matches each
// report to its crash.
func (l *Lab) Run(ctx context.Context) (*LabResult, error) {
	arch := l.Arch
	if arch == "" {
		arch = l.KernelArch
	}
	say := l.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	cases := l.Cases
	if len(cases) == 0 {
		cases = Matrix(nil, nil)
	}
	work := l.Dir
	if l.Mode == ModeSocket {
		// Before the kernel and the fixtures: a tree without the
		// server skips at once.
		ok, err := SocketServerSupported(work)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, ErrNoSocketServer
		}
	}
	res := &LabResult{HostRoot: filepath.Join(work, "root")}
	r := NewInitramfs()
	var modules []string
	var kimg string
	if l.Debian {
		k, err := Debian(l.KernelArch)
		if err != nil {
			return nil, err
		}
		say("kernel: Debian's %s (%s)", DebianFlavours[l.KernelArch], k.Package)
		if modules, err = k.AddModules(r, k.ConsoleModules()...); err != nil {
			return nil, err
		}
		res.Kernel, kimg = k.Package, k.Image
	} else {
		src := "linux-source-6.1"
		if l.Series != "" {
			src = "Debian unstable's linux-source-" + l.Series + ".x"
		}
		say("kernel: minimal %s from %s (kernel/build.sh, cached)", l.KernelArch, src)
		k, err := KernelSeries(l.KernelArch, l.Series)
		if err != nil {
			return nil, err
		}
		res.Kernel, kimg = k, k
	}
	fx, err := fixture.BuildDir(arch)
	if err != nil {
		return nil, err
	}
	res.Fixtures = fx
	say("building the guest init and unwound-handler for %s", l.KernelArch)
	for name, pkg := range map[string]string{
		"init":            "github.com/unwound-dev/unwound/qemu/cmd/guestinit",
		"unwound-handler": "github.com/unwound-dev/unwound/cmd/unwound-handler",
	} {
		if err := BuildGo(pkg, l.KernelArch, filepath.Join(work, name)); err != nil {
			return nil, err
		}
	}
	r.HostFile("/init", 0o755, filepath.Join(work, "init"))
	r.HostFile("/bin/unwound-handler", 0o755, filepath.Join(work, "unwound-handler"))
	// TCG runs guests 10-50x slower than a board: the budgets grow so the
	// 87,000-frame recursion is walked live to its end, as on hardware.
	r.File("/etc/unwound/unwound.toml", 0o644, []byte(`[handler]
deadline = "120s"
freeze_budget = "60s"
save_core_dir = "/var/lib/unwound/cores"
[queue]
dir = "/var/lib/unwound/queue"
allow_volatile = true
max_entries = 1000
max_bytes_kib = 65536
[rate_limit]
count = 0
`))
	if err := AddGlibc(r, arch, res.HostRoot); err != nil {
		return nil, err
	}
	plan := guest.Plan{Modules: modules, Steps: []guest.Step{
		{Mkdir: "/var/lib/unwound/queue"}, {Mkdir: "/var/lib/unwound/cores"},
	}}
	cfg := []string{"/bin/unwound-handler", "--config", "/etc/unwound/unwound.toml"}
	switch l.Mode {
	case "", ModePipe:
		plan.Steps = append(plan.Steps, guest.Step{CorePattern: append(cfg, "--core-pattern")})
	case ModePidfd:
		// "on", not "auto": the lab is there to see %F used.
		plan.Steps = append(plan.Steps, guest.Step{CorePattern: append(cfg, "--pidfd", "on", "--core-pattern")})
	case ModeSocket:
		// The server listens before core_pattern names its socket: a
		// crash never finds the pattern set and nobody listening.
		plan.Steps = append(plan.Steps,
			guest.Step{Mkdir: filepath.Dir(SocketPath)},
			guest.Step{Start: append(cfg, "--serve-coredump-socket", SocketPath)},
			guest.Step{WaitFiles: SocketPath, Count: 1},
			guest.Step{Write: "/proc/sys/kernel/core_pattern", Data: "@@" + SocketPath})
	default:
		return nil, fmt.Errorf("lab: unknown mode %q", l.Mode)
	}
	n, addedMusl := 0, false
	type run struct{ variant, prog, scenario string }
	var runs []run
	for _, cs := range cases {
		v := cs.Variant
		if _, err := os.Stat(fixture.Binary{Arch: arch, Variant: v, Prog: "crash", Dir: fx}.Stripped()); err != nil && isMatrix(v) {
			say("matrix variant %s: not built here (see build.sh's output), skipped", v)
			continue
		}
		musl := false
		for _, prog := range []string{"crash", "crashxx"} {
			b := fixture.Binary{Arch: arch, Variant: v, Prog: prog, Dir: fx}
			if _, err := os.Stat(b.Stripped()); err != nil {
				if prog == "crashxx" && fixture.IsMusl(v) {
					continue // C only
				}
				return nil, fmt.Errorf("variant %s: %w", v, err)
			}
			musl = musl || fixture.IsMusl(v)
			r.HostFile("/bin/"+v+"/"+prog, 0o755, b.Stripped())
			os.MkdirAll(filepath.Join(res.HostRoot, "bin", v), 0o755)
			os.Symlink(b.Stripped(), filepath.Join(res.HostRoot, "bin", v, prog))
		}
		if musl && !addedMusl {
			if err := AddMusl(r, arch, res.HostRoot); err != nil {
				return nil, err
			}
			addedMusl = true
		}
		for _, sc := range cs.Scenarios {
			prog := "crash"
			if sc == "throw" {
				if fixture.IsMusl(v) {
					continue
				}
				prog = "crashxx"
			}
			n++
			runs = append(runs, run{v, prog, sc})
			// The handler names the report; one crash at a time, so
			// the queue's count tells which report is whose.
			plan.Steps = append(plan.Steps,
				guest.Step{Run: []string{"/bin/" + v + "/" + prog, sc}},
				guest.Step{WaitFiles: "/var/lib/unwound/queue/*.json.zst", Count: n},
				// The handler saves the core before it stores the report.
				guest.Step{Ship: "/var/lib/unwound/cores/*", As: "cores", Remove: true})
		}
	}
	plan.Steps = append(plan.Steps,
		guest.Step{Ship: "/var/lib/unwound/queue/*.json.zst", As: "reports"})
	js, _ := json.Marshal(plan)
	r.File("/plan.json", 0o644, js)

	timeout := l.Timeout
	if timeout == 0 {
		timeout = 15 * time.Minute
	}
	say("booting %s (%s) with %d crashes", l.KernelArch, res.Kernel, n)
	m := &Machine{Arch: l.KernelArch, Kernel: kimg, Initramfs: r, Memory: "512M", Timeout: timeout, Dir: work}
	if l.Mode == ModePidfd || l.Mode == ModeSocket {
		// The handler's line per crash is at info level ("… live mode
		// (pidfd) …"): on the console, it tells how each crash came.
		m.Append = "loglevel=7"
	}
	mres, err := m.Run(ctx)
	if mres != nil {
		res.Console, res.Duration = mres.Console, mres.Duration
	}
	if err != nil {
		return res, err
	}
	for _, d := range []string{"cores", "reports"} {
		os.MkdirAll(filepath.Join(work, d), 0o755)
	}
	byPID := map[int]*LabCrash{}
	var reps []*LabCrash
	for name, data := range mres.Files {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return res, err
		}
		if !strings.HasPrefix(name, "reports/") {
			continue
		}
		rep, err := decode.Report(data)
		if err != nil {
			return res, fmt.Errorf("%s: %w", name, err)
		}
		c := &LabCrash{Report: rep, ReportFile: p}
		reps = append(reps, c)
		byPID[rep.PID] = c
	}
	if len(reps) != n {
		return res, fmt.Errorf("%d reports, want %d", len(reps), n)
	}
	// PIDs grow with each run: the i-th smallest PID is the i-th crash.
	sort.Slice(reps, func(i, j int) bool { return reps[i].Report.PID < reps[j].Report.PID })
	exeRE := regexp.MustCompile(`^/bin/([^/]+)/([^/]+)$`)
	for i, c := range reps {
		want := runs[i]
		mm := exeRE.FindStringSubmatch(c.Report.Exe)
		if mm == nil || mm[1] != want.variant || mm[2] != want.prog {
			return res, fmt.Errorf("report of pid %d is from %q, want /bin/%s/%s", c.Report.PID, c.Report.Exe, want.variant, want.prog)
		}
		c.Variant, c.Prog, c.Scenario = want.variant, want.prog, want.scenario
		if cores, _ := filepath.Glob(filepath.Join(work, "cores", fmt.Sprintf("core.%d.*", c.Report.PID))); len(cores) == 1 {
			c.Core = cores[0]
		}
		res.Crashes = append(res.Crashes, *c)
	}
	say("%s: %d crashes, boot to exit %v", l.KernelArch, n, res.Duration.Round(time.Millisecond))
	return res, nil
}
