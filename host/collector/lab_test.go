package collector

import (
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/host/signature"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/labcore"
	"github.com/unwound-dev/unwound/testkit/offline"
)

// A lab crash is one fixture program crashed one way, its core made by
// the host kernel (x86_64) or qemu-user (aarch64, arm), and its report
// made from the core by the handler with the stripped program, as on a
// board.
type labCrash struct {
	arch, variant, prog, scenario string
}

func (c labCrash) String() string {
	return c.arch + "/" + c.variant + "/" + c.prog + "-" + c.scenario
}

// bugs are the distinct bugs of the fixture programs: crash site and
// signal. Scenarios that die at the same site the same way are one bug:
// nullwrite, threads and alloca all store through null_ptr in
// null_write, reached by different paths.
var labBugs = map[string]string{
	"nullwrite":   "null-store",
	"threads":     "null-store",
	"alloca":      "null-store",
	"sighandler":  "null-store",
	"sigaltstack": "null-store",
	"abort":       "abort-in-ab2",
	"raise":       "sigbus-in-rs2",
	"nullfn":      "null-call-in-nf2",
	"memcpy":      "wild-memcpy-in-mc2",
	"recursion":   "stack-overflow-in-recurse",
	"throw":       "uncaught-throw-in-thrower",
	"chainstore":  "null-store-in-cs_leaf",
	"killhandler": "null-store",
}

// labReport makes (or reuses from the fixture cache) the report of one
// crash, and the directory of its unstripped programs.
func labReport(t *testing.T, c labCrash) (*report.Report, fixture.Binary) {
	t.Helper()
	dir := fixture.Build(t, c.arch)
	b := fixture.Binary{Arch: c.arch, Variant: c.variant, Prog: c.prog, Dir: dir}
	if _, err := os.Stat(b.Stripped()); err != nil {
		t.Skipf("%s: not built here", b.Stripped())
	}
	if c.arch == "riscv64" {
		// qemu-user writes no riscv64 cores: a real kernel's, from the
		// QEMU lab.
		core, root := riscvCore(t, b, c.scenario)
		return offline.Report(t, core, root, ""), b
	}
	return offline.Fixture(t, b, c.scenario, b.Sysroot()), b
}

// labCrashes is every scenario of the lab set for arch, built as
// variant.
func labCrashes(arch, variant string) []labCrash {
	if arch == "riscv64" && variant == "clang-lld-default-dynamic" {
		variant = "gcc-mold-default-dynamic" // lld cannot link RISC-V objects that need relaxation
	}
	var out []labCrash
	for _, s := range labScenarios {
		prog := "crash"
		if s == "throw" {
			prog = "crashxx"
		}
		out = append(out, labCrash{arch, variant, prog, s})
	}
	return out
}

// labRISCV is every riscv64 crash of the lab set.
func labRISCV() []labCrash {
	var out []labCrash
	for _, rel := range labReleases {
		out = append(out, labCrashes("riscv64", rel.variant)...)
	}
	return out
}

// riscvCore returns the core of one riscv64 crash, and the guest's files
// as the host sees them (labcore.Cores): the minimal kernel boots under
// QEMU once for every crash of labRISCV, and the cores are cached beside
// the fixtures, keyed by the kernel.
func riscvCore(t *testing.T, b fixture.Binary, scenario string) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-riscv64"); err != nil {
		t.Skip("qemu-system-riscv64 not installed")
	}
	var crashes []labcore.Crash
	for _, c := range labRISCV() {
		crashes = append(crashes, labcore.Crash{Variant: c.variant, Prog: c.prog, Scenario: c.scenario})
	}
	cores, root := labcore.Cores(t, "riscv64", b.Dir, crashes)
	return cores[labcore.Crash{Variant: b.Variant, Prog: b.Prog, Scenario: scenario}.Name()], root
}

// addSymbols puts a crash's files where unwound symbols add would, by
// build id (DIR/symbols/.build-id/xx/rest): the unstripped program, and
// the libraries as the image has them (the C library's .dynsym only).
func addSymbols(t *testing.T, dir string, r *report.Report, b fixture.Binary) {
	t.Helper()
	for _, m := range r.Modules {
		if len(m.BuildID) < 3 || m.BuildIDKind == "code" {
			continue
		}
		src := filepath.Join(b.Sysroot(), m.Path)
		if filepath.Base(m.Path) == b.Prog {
			src = b.Unstripped()
		}
		data, err := os.ReadFile(src)
		if err != nil {
			continue // [vdso] and the like
		}
		dst := filepath.Join(dir, SymbolsDir, ".build-id", m.BuildID[:2], m.BuildID[2:])
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var updateTraces = flag.Bool("update-traces", false, "rewrite host/signature/testdata/traces.json from the lab crashes")

// labTrace is one lab crash's crashed-thread frames, symbolized, as the
// signature tests read them (host/signature/testdata/traces.json).
type labTrace struct {
	Arch     string            `json:"arch"`
	Variant  string            `json:"variant"`
	Scenario string            `json:"scenario"`
	Frames   []signature.Frame `json:"frames"`
}

// TestLabTraces writes the lab crashes' symbolized crashed-thread frames
// for the signature tests (go test -run TestLabTraces -update-traces):
// with the programs' symbols and libc's (host: libc6-dbg; aarch64, arm:
// .dynsym), and without any.
func TestLabTraces(t *testing.T) {
	if !*updateTraces {
		t.Skip("-update-traces rewrites host/signature/testdata/traces.json")
	}
	var out []labTrace
	for _, arch := range []string{"x86_64", "aarch64", "arm", "riscv64"} {
		for _, rel := range labReleases {
			for _, lc := range labCrashes(arch, rel.variant) {
				v, s := lc.variant, lc.scenario
				r, b := labReport(t, lc)
				for _, symbols := range []bool{true, false} {
					dir := t.TempDir()
					if symbols {
						addSymbols(t, dir, r, b)
					}
					c := open(t, dir, Options{DebugDirs: []string{"/usr/lib/debug"}})
					if !symbols {
						c = open(t, dir, Options{})
					}
					_, frames := c.symbolize(r)
					for i := range frames {
						// The paths of the host's cache mean nothing
						// elsewhere: keep the base names.
						if frames[i].Module != "" {
							frames[i].Module = "/usr/bin/" + filepath.Base(frames[i].Module)
						}
					}
					if len(frames) > 24 {
						frames = frames[:24] // the recursion's first frames suffice
					}
					name := v
					if !symbols {
						name += "-nosymbols"
					}
					out = append(out, labTrace{arch, name, s, frames})
					c.Close()
				}
			}
		}
	}
	// One trace a line: a diff shows which crash changed.
	js := []byte("[\n")
	for i, tr := range out {
		b, err := json.Marshal(tr)
		if err != nil {
			t.Fatal(err)
		}
		js = append(js, b...)
		if i < len(out)-1 {
			js = append(js, ',')
		}
		js = append(js, '\n')
	}
	js = append(js, ']')
	dst := filepath.Join("..", "signature", "testdata", "traces.json")
	os.MkdirAll(filepath.Dir(dst), 0o755)
	if err := os.WriteFile(dst, append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// labScenario is each lab report's scenario, by report id.
var labScenario = map[string]string{}

// labScenarios are every scenario of the fixture programs.
var labScenarios = []string{"nullwrite", "abort", "raise", "nullfn", "memcpy", "sighandler", "sigaltstack", "threads", "alloca", "recursion", "throw", "chainstore", "killhandler"}

// labRelease is one release of the lab fleet: a build of the fixture
// programs (its own build ids and addresses) and the boards running it.
type labRelease struct {
	variant string
	release map[string]string
	devices int
}

var labReleases = []labRelease{
	{"O2-dynamic", map[string]string{"ID": "debian", "VERSION_ID": "12", "IMAGE_ID": "lab", "IMAGE_VERSION": "2.4.0"}, 3},
	// The next release is built by another compiler and linker: every
	// address and build id differs; the bugs are the same.
	{"clang-lld-default-dynamic", map[string]string{"ID": "debian", "VERSION_ID": "12", "IMAGE_ID": "lab", "IMAGE_VERSION": "2.4.1"}, 4},
}

// labFleet is the lab's reports: every scenario crashed on x86_64 (host
// kernel cores), aarch64 and arm (qemu-user cores) and riscv64 (kernel
// cores from the QEMU lab), in both releases, each crash reported by
// several boards. bug names each report's bug.
func labFleet(t *testing.T) (reports [][]byte, bug map[string]string, bins []fixture.Binary, reps []*report.Report) {
	t.Helper()
	bug = map[string]string{}
	n := 0
	for _, arch := range []string{"x86_64", "aarch64", "arm", "riscv64"} {
		for _, rel := range labReleases {
			for _, lc := range labCrashes(arch, rel.variant) {
				s := lc.scenario
				r, b := labReport(t, lc)
				bins = append(bins, b)
				reps = append(reps, r)
				for d := 0; d < rel.devices; d++ {
					n++
					cp := *r
					cp.ID = fmt.Sprintf("%032x", 0xab0000+n)
					cp.DeviceID = fmt.Sprintf("%s-board-%d", arch, d)
					cp.Time, cp.TimeTrusted = 1795000000+int64(n)*600, true
					js, err := json.Marshal(&cp)
					if err != nil {
						t.Fatal(err)
					}
					var m map[string]any
					json.Unmarshal(js, &m)
					m["release"] = rel.release
					m["device"] = map[string]any{"attributes": map[string]string{"hw_rev": fmt.Sprintf("rev%d", d%2)}}
					js, _ = json.Marshal(m)
					reports = append(reports, report.Compress(js))
					bug[cp.ID] = labBugs[s]
					labScenario[cp.ID] = s
				}
			}
		}
	}
	return reports, bug, bins, reps
}

// TestLabGrouping: 364 real reports of 8 bugs (by the default rules)
// from 4 architectures and 2 releases built by different toolchains.
// Half arrive before any symbols: they group by module+offset. Then the
// programs' symbols arrive in DIR/symbols (as unwound symbols add lays
// them out), the generation file changes, and the unsymbolized groups
// merge into the symbolized ones. In the end every bug is exactly one
// group, no group mixes two bugs, and the counts add up.
func TestLabGrouping(t *testing.T) {
	if testing.Short() {
		t.Skip("makes real cores")
	}
	reports, bug, bins, reps := labFleet(t)
	if len(reports) < 200 {
		t.Fatalf("%d reports", len(reports))
	}
	dir := t.TempDir()
	c := open(t, dir, Options{DebugDirs: []string{"/usr/lib/debug"}})
	half := len(reports) / 2
	// Interleave so that every bug has reports on both sides.
	order := make([]int, 0, len(reports))
	for i := 0; i < len(reports); i += 2 {
		order = append(order, i)
	}
	for i := 1; i < len(reports); i += 2 {
		order = append(order, i)
	}
	for _, i := range order[:half] {
		if _, stored, inv, err := c.Put(reports[i], ""); err != nil || inv != nil || !stored {
			t.Fatal(err, inv)
		}
	}
	before, _ := c.Groups(Filter{})
	unsym := 0
	for _, g := range before {
		if !g.Symbolized {
			unsym++
		}
	}
	t.Logf("before symbols: %d groups, %d of them unsymbolized", len(before), unsym)
	if unsym == 0 {
		t.Fatal("no unsymbolized group before symbols arrived")
	}
	for i, b := range bins {
		addSymbols(t, dir, reps[i], b)
	}
	os.WriteFile(filepath.Join(dir, SymbolsDir, Generation), []byte("1\n"), 0o644)
	res, err := c.resymbolize(c.available())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resymbolized: %+v", res)
	for _, i := range order[half:] {
		if _, stored, inv, err := c.Put(reports[i], ""); err != nil || inv != nil || !stored {
			t.Fatal(err, inv)
		}
	}
	checkLabGroups(t, c, bug, len(reports))
	if len(res.Merged) == 0 {
		t.Fatal("no group merged")
	}
	// A merged group's old id leads to its new group.
	d, err := c.Group(res.Merged[0].From)
	if err != nil || d.ID != res.Merged[0].To {
		t.Fatalf("merged group %s: %+v %v", res.Merged[0].From, d, err)
	}
}

// checkLabGroups asserts one group per bug and none mixing two.
func checkLabGroups(t *testing.T, c *Collector, bug map[string]string, total int) {
	t.Helper()
	groups, err := c.Groups(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	bugGroups := map[string][]string{}
	sum := 0
	for _, g := range groups {
		reps, err := c.Reports(ReportQuery{Group: g.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != g.Count {
			t.Errorf("group %s %q: count %d, %d reports", g.ID, g.Signature, g.Count, len(reps))
		}
		sum += g.Count
		bugs := map[string]int{}
		for _, r := range reps {
			bugs[bug[r.ID]]++
		}
		var names []string
		for b := range bugs {
			names = append(names, b)
			bugGroups[b] = append(bugGroups[b], g.Signature)
		}
		sort.Strings(names)
		t.Logf("%-28q %-8s %3d reports %2d boards releases %d: %s", g.Signature, g.SignalName, g.Count, g.Boards, len(g.Releases), strings.Join(names, ", "))
		if len(bugs) != 1 {
			t.Errorf("group %q mixes bugs %v", g.Signature, names)
		}
		if !g.Symbolized {
			t.Errorf("group %q is not symbolized", g.Signature)
		}
		if len(g.Releases) != 2 {
			t.Errorf("group %q: releases %+v", g.Signature, g.Releases)
		}
	}
	for b, sigs := range bugGroups {
		if len(sigs) != 1 {
			t.Errorf("bug %s is in %d groups: %q", b, len(sigs), sigs)
		}
	}
	if sum != total {
		t.Errorf("groups count %d reports, %d were stored", sum, total)
	}
}

// With a project's own rule, null_write (a helper every path calls) is a
// prefix frame like memcpy, and its callers tell the null stores apart:
// 11 bugs, 11 groups.
func TestLabGroupingProjectRules(t *testing.T) {
	if testing.Short() {
		t.Skip("makes real cores")
	}
	reports, _, bins, reps := labFleet(t)
	// The null stores by the function that calls null_write.
	byCaller := map[string]string{
		"nullwrite": "null-store-in-nw3", "threads": "null-store-in-nw3",
		"sighandler": "null-store-in-handler", "sigaltstack": "null-store-in-handler",
		"alloca": "null-store-in-vla", "killhandler": "null-store-in-kh2",
	}
	bug := map[string]string{}
	for id, s := range labScenario {
		bug[id] = labBugs[s]
		if b, ok := byCaller[s]; ok {
			bug[id] = b
		}
	}
	rules, err := signature.Parse([]byte("prefix = ['^null_write$']\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, b := range bins {
		addSymbols(t, dir, reps[i], b)
	}
	c := open(t, dir, Options{DebugDirs: []string{"/usr/lib/debug"}, Rules: signature.Default().Extend(rules)})
	for _, data := range reports {
		if _, stored, inv, err := c.Put(data, ""); err != nil || inv != nil || !stored {
			t.Fatal(err, inv)
		}
	}
	checkLabGroups(t, c, bug, len(reports))
	if gs, _ := c.Groups(Filter{}); len(gs) != 11 {
		t.Fatalf("%d groups, want 11", len(gs))
	}
}

// Symbols for one build only: a group whose reports split moves them one
// by one, each with its counts and facets, and keeps the rest.
func TestRegroupSplit(t *testing.T) {
	b := fixture.Binary{Arch: "x86_64", Variant: "O2-dynamic", Prog: "crash", Dir: fixture.Build(t, "x86_64")}
	ef, err := elf.Open(b.Unstripped())
	if err != nil {
		t.Fatal(err)
	}
	syms, _ := ef.Symbols()
	id := buildID(t, ef)
	ef.Close()
	var nullWrite uint64
	for _, s := range syms {
		if s.Name == "null_write" {
			nullWrite = s.Value
		}
	}
	if nullWrite == 0 || id == "" {
		t.Fatal("no null_write or no build id")
	}
	dir := t.TempDir()
	c := open(t, dir, Options{})
	// Two builds of /usr/bin/crash crash at the same file offset: one
	// group by module+offset until symbols say otherwise.
	for i, bid := range []string{id, "00" + id[2:]} {
		f := fake{id: 100 + i, device: fmt.Sprintf("b%d", i), exe: "/usr/bin/crash", signal: 11, offset: nullWrite}
		js := f.encode(t)
		raw, _ := decode.JSON(js)
		raw = []byte(strings.Replace(string(raw), "00112233445566778899aabbccddeeff00112233", bid, 1))
		if _, stored, inv, err := c.Put(raw, ""); !stored || inv != nil || err != nil {
			t.Fatal(stored, inv, err)
		}
	}
	gs, _ := c.Groups(Filter{})
	if len(gs) != 1 || gs[0].Count != 2 {
		t.Fatalf("before: %+v", gs)
	}
	old := gs[0].ID
	dst := filepath.Join(dir, SymbolsDir, ".build-id", id[:2], id[2:]+".debug")
	os.MkdirAll(filepath.Dir(dst), 0o755)
	data, _ := os.ReadFile(b.Unstripped())
	os.WriteFile(dst, data, 0o644)
	res, err := c.resymbolize(c.available())
	if err != nil || res.Reports != 1 || res.Regrouped != 1 || len(res.Merged) != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	gs, _ = c.Groups(Filter{})
	if len(gs) != 2 {
		t.Fatalf("after: %+v", gs)
	}
	for _, g := range gs {
		d, _ := c.Group(g.ID)
		want := "b0"
		if g.ID == old {
			want = "b1"
		} else if g.Signature != "null_write" {
			t.Errorf("moved to %q", g.Signature)
		}
		if g.Count != 1 || g.Kept != 1 || g.Boards != 1 || d.Devices[0].Value != want || len(d.Days) != 1 {
			t.Errorf("group %s %q: %+v %+v", g.ID, g.Signature, g, d.Devices)
		}
	}
}

func buildID(t *testing.T, ef *elf.File) string {
	t.Helper()
	s := ef.Section(".note.gnu.build-id")
	if s == nil {
		return ""
	}
	b, err := s.Data()
	if err != nil || len(b) < 16 {
		return ""
	}
	return fmt.Sprintf("%x", b[16:])
}
