package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/handler/config"
	"github.com/unwound-dev/unwound/handler/report"
	"github.com/unwound-dev/unwound/internal/fixture"
	"github.com/unwound-dev/unwound/qemu/guest"
)

// TestLab boots every architecture's minimal kernel with the real
// unwound-handler installed through its own --core-pattern line, crashes
// every fixture, and ships out the reports and (save_core_dir) the full
// cores. Each report must come from the kernel's pipe in live mode, and
// equal gdb's walk of the same core on the architectures whose unwinding
// is complete.
func TestLab(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU guests")
	}
	for _, arch := range Arches {
		arch := arch
		t.Run(arch, func(t *testing.T) { labArch(t, arch, arch) })
	}
	// A 32-bit ARM userland on the AArch64 kernel (COMPAT): the core is
	// ELFCLASS32/EM_ARM while the handler is an arm64 binary; the
	// architecture must come from the core, never from the machine.
	t.Run("arm-on-aarch64", func(t *testing.T) { labArch(t, "aarch64", "arm") })
}

// gdbCompared lists the architectures whose reports are compared with gdb.
var gdbCompared = map[string]bool{"aarch64": true, "x86_64": true, "riscv64": true, "arm": true}

// labArch boots kernelArch's kernel with arch's programs and glibc (they
// differ for 32-bit ARM programs on the AArch64 kernel).
func labArch(t *testing.T, kernelArch, arch string) {
	kernel, err := Kernel(kernelArch)
	if err != nil {
		t.Fatal(err)
	}
	fx := fixture.Build(t, arch)
	work := t.TempDir()
	if d := os.Getenv("UNWOUND_LAB_KEEP"); d != "" {
		// Keep the guest's files (cores, reports, the host mirror) to
		// look at a failure by hand.
		work = filepath.Join(d, kernelArch+"-"+arch)
		os.RemoveAll(work)
		os.MkdirAll(work, 0o755)
	}
	r := NewInitramfs()
	r.HostFile("/init", 0o755, goBuild(t, "github.com/unwound-dev/unwound/qemu/cmd/guestinit", kernelArch, filepath.Join(work, "init")))
	r.HostFile("/bin/unwound-handler", 0o755, goBuild(t, "github.com/unwound-dev/unwound/cmd/unwound-handler", kernelArch, filepath.Join(work, "unwound-handler")))
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
	hostRoot := filepath.Join(work, "root")
	if err := AddGlibc(r, arch, hostRoot); err != nil {
		t.Skip(err)
	}
	plan := guest.Plan{Steps: []guest.Step{
		{Mkdir: "/var/lib/unwound/queue"}, {Mkdir: "/var/lib/unwound/cores"},
		{CorePattern: []string{"/bin/unwound-handler", "--config", "/etc/unwound/unwound.toml", "--core-pattern"}},
	}}
	n := 0
	for _, v := range fixture.Variants {
		for _, prog := range []string{"crash", "crashxx"} {
			b := fixture.Binary{Arch: arch, Variant: v, Prog: prog, Dir: fx}
			gp := "/bin/" + v + "/" + prog
			r.HostFile(gp, 0o755, b.Stripped())
			os.MkdirAll(filepath.Join(hostRoot, "bin", v), 0o755)
			os.Symlink(b.Stripped(), filepath.Join(hostRoot, "bin", v, prog))
		}
		for _, sc := range append(append([]string(nil), fixture.Scenarios...), "throw") {
			prog := "crash"
			if sc == "throw" {
				prog = "crashxx"
			}
			n++
			plan.Steps = append(plan.Steps,
				guest.Step{Run: []string{"/bin/" + v + "/" + prog, sc}},
				guest.Step{WaitFiles: "/var/lib/unwound/queue/*.json.zst", Count: n})
		}
	}
	plan.Steps = append(plan.Steps,
		guest.Step{Ship: "/var/lib/unwound/queue/*.json.zst", As: "reports"},
		guest.Step{Ship: "/var/lib/unwound/cores/*", As: "cores"})
	js, _ := jsonMarshal(plan)
	r.File("/plan.json", 0o644, js)

	m := &Machine{Arch: kernelArch, Kernel: kernel, Initramfs: r, Memory: "512M", Timeout: 15 * time.Minute, Dir: work}
	res, err := m.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d crashes, %d files shipped, boot to poweroff %v", arch, n, len(res.Files), res.Duration.Round(time.Millisecond))

	cores := filepath.Join(work, "cores")
	os.MkdirAll(cores, 0o755)
	var reports []*report.Report
	for name, data := range res.Files {
		if strings.HasPrefix(name, "cores/") {
			os.WriteFile(filepath.Join(work, name), data, 0o644)
			continue
		}
		rep, err := report.Decode(data)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		reports = append(reports, rep)
	}
	if len(reports) != n {
		t.Fatalf("%d reports, want %d", len(reports), n)
	}
	exeRE := regexp.MustCompile(`^/bin/([^/]+)/([^/]+)$`)
	for _, rep := range reports {
		mm := exeRE.FindStringSubmatch(rep.Exe)
		if mm == nil {
			t.Errorf("report %s: exe %q", rep.ID, rep.Exe)
			continue
		}
		b := fixture.Binary{Arch: arch, Variant: mm[1], Prog: mm[2], Dir: fx}
		name := fmt.Sprintf("%s/%s pid %d", mm[1], mm[2], rep.PID)
		t.Run(mm[1]+"/"+mm[2]+"/"+strconv.Itoa(rep.PID), func(t *testing.T) {
			if rep.Handler.Mode != "live" || rep.Arch != arch {
				t.Errorf("%s: mode %s arch %s errors %v", name, rep.Handler.Mode, rep.Arch, rep.Errors)
			}
			core, _ := filepath.Glob(filepath.Join(cores, fmt.Sprintf("core.%d.*", rep.PID)))
			if len(core) != 1 {
				t.Fatalf("no saved core for pid %d", rep.PID)
			}
			// The same core offline, from the host's copy of the guest's files.
			off, err := handler.Offline(handler.OfflineOptions{CoreFile: core[0], Sysroot: hostRoot, Config: config.Default(), Log: handler.NewLogger(io.Discard)})
			if err != nil {
				t.Fatal(err)
			}
			if !gdbCompared[arch] {
				t.Skipf("%s: gdb comparison waits for ARM EHABI", arch)
			}
			if arch == "arm" && strings.Contains(name, "crash") && isRecursion(rep) {
				// gdb-multiarch 13 dies (SIGSEGV) walking these cores. The
				// live report must still equal the offline one, and hold
				// the whole 100,000-frame walk.
				th := rep.Crashed()
				if th == nil || th.Elided < 10000 || pcsOf(rep) != pcsOf(off) {
					t.Errorf("arm recursion: elided %v; live and offline traces differ: %v", th, pcsOf(rep) != pcsOf(off))
				}
				return
			}
			want := fixture.OracleSysroot(t, b, core[0], hostRoot)
			cmp := fixture.CompareReport
			switch {
			case arch != "x86_64" && arch != "aarch64" && strings.HasSuffix(b.Variant, "static"):
				// Stripped static ARM/RISC-V: libc.a leaves functions
				// without unwind tables, and without symbols their start
				// is unknown; gdb reads the symbols. Shorter, never wrong.
				cmp = fixture.ComparePrefix
			case arch == "riscv64":
				cmp = fixture.CompareBeyondGDB
			}
			cmp(t, rep, want)
			cmp(t, off, want)
		})
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func goBuild(t testing.TB, pkg, arch, out string) string {
	t.Helper()
	if err := BuildGo(pkg, arch, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// isRecursion tells the deep-recursion crash by its trace: frames elided.
func isRecursion(r *report.Report) bool {
	th := r.Crashed()
	return th != nil && th.Elided > 0
}

func pcsOf(r *report.Report) string {
	var b strings.Builder
	for _, th := range r.Threads {
		for _, f := range th.Frames {
			b.WriteString(f.PC.String() + " ")
		}
		fmt.Fprintf(&b, "| %d\n", th.Elided)
	}
	return b.String()
}
