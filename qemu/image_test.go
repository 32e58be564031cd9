package qemu

import (
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// imageCase is one packaged image: the machine (kernel) architecture, the
// architecture of the crashing programs, and the CPU.
type imageCase struct {
	name, arch, userArch, cpu string
}

var imageCases = []imageCase{
	{"aarch64", "aarch64", "aarch64", "cortex-a53"},
	// FEAT_PAuth: the kernel enables pointer authentication for user
	// space, so glibc and -mbranch-protection code sign return addresses.
	{"aarch64-max", "aarch64", "aarch64", "max"},
	{"arm", "arm", "arm", ""},
	{"riscv64", "riscv64", "riscv64", ""},
	{"x86_64", "x86_64", "x86_64", ""},
	// An armhf userland on the arm64 kernel (COMPAT); the packaged
	// handler is the board's arm64 binary.
	{"armhf-on-aarch64", "aarch64", "arm", "cortex-a53"},
}

// imageVariant is how the crash programs are built for the packaged
// images: what a distribution ships (-O2, dynamic, default flags, stripped
// on the board with our MiniDebugInfo added, as the Yocto class and the
// Buildroot option do). Default flags on ARM and RISC-V mean no unwind
// tables for C: the -notables builds (fixture.MiniDebugInfoVariants; on
// ARM the Thumb-2 one, the compiler's default).
func imageVariant(arch string) string {
	if arch == "arm" || arch == "riscv64" {
		return "O2-dynamic-notables"
	}
	return "O2-dynamic"
}

// A user's own system (docs/qemu-lab.md): go test ./qemu -run TestUserImage -args -image.kernel …
var (
	userKernel   = flag.String("image.kernel", "", "TestUserImage: the kernel image to boot (Buildroot output/images/Image, Yocto tmp/deploy/images/<machine>/Image)")
	userInitrd   = flag.String("image.initrd", "", "TestUserImage: the root filesystem as a cpio archive (rootfs.cpio, rootfs.cpio.gz, *.cpio.gz) with unwound installed")
	userArch     = flag.String("image.arch", "aarch64", "TestUserImage: QEMU system architecture: aarch64, arm, riscv64, x86_64")
	userProgArch = flag.String("image.progarch", "", "TestUserImage: architecture of the crash programs (default: image.arch; arm for an armhf userland on aarch64)")
	userMachine  = flag.String("image.machine", "", "TestUserImage: QEMU -M value (default: the lab's for the arch)")
	userCPU      = flag.String("image.cpu", "", "TestUserImage: QEMU -cpu value")
	userConsole  = flag.String("image.console", "", "TestUserImage: the kernel's console device (default ttyAMA0 on arm, ttyS0 else)")
	userAppend   = flag.String("image.append", "", "TestUserImage: extra kernel command line (e.g. rdinit=/sbin/init)")
	userPort     = flag.String("image.port", "", "TestUserImage: the board's end of the link (default /dev/hvc0; /dev/ttyS1 on x86_64)")
	userMemory   = flag.String("image.memory", "512M", "TestUserImage: guest memory")
	userQEMU     = flag.String("image.qemu", "", "TestUserImage: more QEMU arguments, space-separated (e.g. \"-bios default\" with -image.machine on riscv64)")
)

// imageSummary collects "PASS"/"FAIL" per case and scenario for the table
// TestImage prints at its end.
type imageSummary struct {
	mu   sync.Mutex
	rows map[string]map[string]string
	time map[string]string
}

func (s *imageSummary) set(c, scen, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows[c] == nil {
		s.rows[c] = map[string]string{}
	}
	s.rows[c][scen] = v
}

// TestImage boots the packaged system on every architecture: files from
// `make install INIT=sysvinit` for the board, BusyBox init running the
// installed sysctl file and init script, the uploader daemon draining the
// reports over the board's serial line to `unwound receive` on a host pty.
// Every scenario's received report must equal gdb's walk of the full core
// saved in the same run, and symbolize on the host to gdb's functions.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU guests")
	}
	sum := &imageSummary{rows: map[string]map[string]string{}, time: map[string]string{}}
	for _, c := range imageCases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			kernel, err := Kernel(c.arch)
			if err != nil {
				t.Fatal(err)
			}
			runImage(t, c, kernel, "", sum)
			sum.mu.Lock()
			sum.time[c.name] = time.Since(start).Round(time.Second).String()
			sum.mu.Unlock()
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-18s", "image")
	for _, s := range ImageScenarios {
		fmt.Fprintf(&b, " %-10s", s.Name())
	}
	b.WriteString(" time\n")
	for _, c := range imageCases {
		fmt.Fprintf(&b, "%-18s", c.name)
		for _, s := range ImageScenarios {
			v := sum.rows[c.name][s.Name()]
			if v == "" {
				v = "-"
			}
			fmt.Fprintf(&b, " %-10s", v)
		}
		fmt.Fprintf(&b, " %s\n", sum.time[c.name])
	}
	t.Logf("packaged images, per scenario:\n%s", b.String())
}

// TestUserImage boots a user's own kernel and cpio root filesystem (with
// unwound installed by the Yocto layer or the Buildroot package) and runs
// the same scenarios (flags -image.*, docs/qemu-lab.md). Without flags it
// checks the runner itself on a stand-in: the lab's aarch64 kernel and a
// gzip'd cpio of PackagedRoot, shaped like a Buildroot output/images.
func TestUserImage(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	c := imageCase{name: "user", arch: *userArch, userArch: *userProgArch, cpu: *userCPU}
	if c.userArch == "" {
		c.userArch = c.arch
	}
	kernel, initrd := *userKernel, *userInitrd
	if kernel == "" || initrd == "" {
		if kernel != "" || initrd != "" {
			t.Fatal("give both -image.kernel and -image.initrd")
		}
		c = imageCase{name: "user-standin", arch: "aarch64", userArch: "aarch64", cpu: "cortex-a53"}
		var err error
		if kernel, err = Kernel(c.arch); err != nil {
			t.Fatal(err)
		}
		initrd = standinRootfs(t, c.arch)
	}
	sum := &imageSummary{rows: map[string]map[string]string{}}
	runImage(t, c, kernel, initrd, sum)
	t.Logf("per scenario: %v", sum.rows[c.name])
}

// standinRootfs writes PackagedRoot as rootfs.cpio.gz, as Buildroot does
// with BR2_TARGET_ROOTFS_CPIO_GZIP.
func standinRootfs(t *testing.T, arch string) string {
	dir := t.TempDir()
	tree := filepath.Join(dir, "target")
	if err := PackagedRoot(arch, tree); err != nil {
		t.Fatal(err)
	}
	r := NewInitramfs()
	if err := r.HostTree(tree, "/"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "rootfs.cpio.gz")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if _, err := r.WriteTo(zw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func runImage(t *testing.T, c imageCase, kernel, baseInitrd string, sum *imageSummary) {
	fx := fixture.Build(t, c.userArch)
	work := t.TempDir()
	if d := os.Getenv("UNWOUND_LAB_KEEP"); d != "" {
		work = filepath.Join(d, "image-"+c.name)
		os.RemoveAll(work)
		os.MkdirAll(work, 0o755)
	}
	port := "/dev/hvc0"
	if c.arch == "x86_64" {
		port = "" // the shipped default, /dev/ttyS1: -M pc has a second UART
	}
	if baseInitrd != "" && *userPort != "" {
		port = *userPort
	}
	rootDir, hostRoot := filepath.Join(work, "rootfs"), filepath.Join(work, "root")
	variant := imageVariant(c.userArch)
	t0 := time.Now()
	if baseInitrd == "" {
		if err := ImageRoot(c.arch, rootDir, port, ImageScenarios); err != nil {
			t.Fatal(err)
		}
	} else {
		// A user's system has its own libc: static programs; its own
		// unwound, configured for the test through /etc/default/unwound.
		variant = "O2-static"
		if err := userOverlay(rootDir, port); err != nil {
			t.Fatal(err)
		}
	}
	tInstall := time.Since(t0)
	unwound, err := HostUnwound(work)
	if err != nil {
		t.Fatal(err)
	}
	r := NewInitramfs()
	shipped := map[string]string{} // program → the file the board runs
	for _, prog := range []string{"crash", "crashxx"} {
		b := fixture.Binary{Arch: c.userArch, Variant: variant, Prog: prog, Dir: fx}
		shipped[prog] = b.Stripped()
		if baseInitrd == "" {
			shipped[prog] = filepath.Join(work, "shipped", prog)
			os.MkdirAll(filepath.Dir(shipped[prog]), 0o755)
			if err := AddMiniDebugInfo(unwound, c.userArch, b.Unstripped(), b.Stripped(), shipped[prog]); err != nil {
				t.Fatal(err)
			}
			if f, err := elf.Open(shipped[prog]); err != nil || f.Section(".gnu_debugdata") == nil {
				t.Fatalf("%s: no .gnu_debugdata (%v)", shipped[prog], err)
			} else {
				f.Close()
			}
		}
		r.HostFile("/usr/bin/"+prog, 0o755, shipped[prog])
		os.MkdirAll(filepath.Join(hostRoot, "usr/bin"), 0o755)
		os.Symlink(b.Unstripped(), filepath.Join(hostRoot, "usr/bin", prog))
	}
	if err := r.HostTree(rootDir, "/"); err != nil {
		t.Fatal(err)
	}
	if baseInitrd == "" {
		if err := AddGlibc(r, c.userArch, hostRoot); err != nil {
			t.Skip(err)
		}
	}
	m := &Machine{Arch: c.arch, Kernel: kernel, Initramfs: r, CPU: c.cpu, Memory: "512M",
		Timeout: 10 * time.Minute, Dir: work, LinkUART: c.arch == "x86_64" && port == ""}
	if baseInitrd != "" {
		m.BaseInitrd, m.MachineType, m.Console, m.Append, m.Memory = baseInitrd, *userMachine, *userConsole, *userAppend, *userMemory
		m.LinkUART = strings.HasPrefix(port, "/dev/ttyS")
		m.Extra = strings.Fields(*userQEMU)
	}
	ir := &ImageRun{Machine: m, Unwound: unwound, Received: filepath.Join(work, "received"), Count: len(ImageScenarios), Log: t.Logf}
	res, err := ir.Run(context.Background())
	if err != nil {
		if res != nil && res.Result != nil {
			t.Logf("console:\n%s", tail(res.Console, 6000))
			t.Logf("receive:\n%s", res.ReceiveLog)
		}
		for _, s := range ImageScenarios {
			sum.set(c.name, s.Name(), "FAIL")
		}
		t.Fatal(err)
	}
	t.Logf("%s: install+image %v, boot to reboot %v, %d reports received", c.name, tInstall.Round(time.Millisecond),
		res.Duration.Round(time.Millisecond), len(res.Reports))
	for _, l := range strings.Split(res.Console, "\n") {
		if strings.HasPrefix(l, "unwound-image:") || strings.HasPrefix(l, "Running sysctl") || strings.HasPrefix(l, "Starting unwound") {
			t.Log(strings.TrimSpace(l))
		}
	}
	// The installed sysctl file and init script both ran, and succeeded.
	wants := []string{"Starting unwound: OK", "unwound-image: uploader running", "unwound-image: queue drained"}
	if baseInitrd == "" {
		wants = append(wants, "Running sysctl: OK") // our BusyBox S02sysctl
	}
	for _, want := range wants {
		if !strings.Contains(res.Console, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if baseInitrd == "" {
		// BusyBox sysctl -p applied the installed 60-unwound.conf whole
		// (its core_pattern value has spaces), before the init script ran.
		conf, err := os.ReadFile(filepath.Join(rootDir, "etc/sysctl.d/60-unwound.conf"))
		if err != nil {
			t.Fatal(err)
		}
		var want string
		for _, l := range strings.Split(string(conf), "\n") {
			if v, ok := strings.CutPrefix(l, "kernel.core_pattern = "); ok {
				want = v
			}
		}
		if want == "" || !strings.Contains(res.Console, "unwound-image: after sysctl.d: "+want) {
			t.Errorf("core_pattern after S02sysctl is not the installed 60-unwound.conf's %q", want)
		}
	}
	cores := filepath.Join(work, "cores")
	os.MkdirAll(cores, 0o755)
	for name, data := range res.Files {
		if strings.HasPrefix(name, "left/") {
			t.Errorf("%s stayed in the board's queue", name)
			continue
		}
		os.WriteFile(filepath.Join(work, name), data, 0o644)
	}
	byPID := map[int]string{}
	for _, p := range res.Reports {
		z, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := decode.Report(z)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		byPID[rep.PID] = p
	}
	for _, s := range ImageScenarios {
		s := s
		ok := t.Run(s.Name(), func(t *testing.T) {
			b := fixture.Binary{Arch: c.userArch, Variant: variant, Prog: s.Prog, Dir: fx}
			checkImageScenario(t, c, s, b, shipped[s.Prog], res.PIDs[s.Name()], byPID, cores, hostRoot, unwound)
		})
		v := "PASS"
		if !ok {
			v = "FAIL"
		}
		sum.set(c.name, s.Name(), v)
	}
}

// userOverlay is what the test adds to a user's root filesystem: a test
// configuration selected through /etc/default/unwound (which the installed
// init script reads), the cores directory, and the driver as the last init
// script for BusyBox init (/etc/init.d/S99…) and sysvinit (/etc/rc5.d).
func userOverlay(dir, port string) error {
	cfg, err := os.ReadFile(filepath.Join(repoRoot(), "configs", "unwound.toml"))
	if err != nil {
		return err
	}
	if port == "" {
		port = "/dev/hvc0"
	}
	if cfg, err = imageConfig(cfg, port); err != nil {
		return err
	}
	for _, d := range []string{"etc/unwound", "etc/default", "etc/init.d", "etc/rc5.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "var/lib/unwound/cores"), 0o700); err != nil {
		return err
	}
	files := map[string]string{
		"etc/unwound/image-test.toml": string(cfg),
		"etc/default/unwound":         "CONFIG=/etc/unwound/image-test.toml\n",
		"etc/init.d/S99unwound-image": driverScript(ImageScenarios),
	}
	for p, text := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(text), 0o755); err != nil {
			return err
		}
	}
	return os.Symlink("../init.d/S99unwound-image", filepath.Join(dir, "etc/rc5.d/S99unwound-image"))
}

func checkImageScenario(t *testing.T, c imageCase, s ImageScenario, b fixture.Binary, shipped string, pid int, byPID map[int]string, cores, hostRoot, unwound string) {
	if pid == 0 {
		t.Fatalf("the guest did not run %s", s.Name())
	}
	path, ok := byPID[pid]
	if !ok {
		t.Fatalf("no report received for pid %d", pid)
	}
	z, _ := os.ReadFile(path)
	rep, err := decode.Report(z)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Handler.Mode != "live" || rep.Arch != c.userArch || rep.Exe != "/usr/bin/"+s.Prog {
		t.Errorf("mode %s arch %s exe %s errors %v", rep.Handler.Mode, rep.Arch, rep.Exe, rep.Errors)
	}
	core, _ := filepath.Glob(filepath.Join(cores, fmt.Sprintf("core.%d.*", pid)))
	if len(core) != 1 {
		t.Fatalf("no saved core for pid %d", pid)
	}
	sym := symbolizeJSON(t, unwound, hostRoot, path)
	if c.userArch == "arm" && s.Arg == "recursion" {
		// gdb-multiarch 13 dies (SIGSEGV) walking 32-bit ARM deep
		// recursion cores (docs/qemu-lab.md): the live report must equal
		// the offline walk of the same core and hold the whole recursion.
		// The offline handler reads the board's program, as the live one
		// did.
		board := t.TempDir()
		os.MkdirAll(filepath.Join(board, "usr/bin"), 0o755)
		os.Symlink(shipped, filepath.Join(board, "usr/bin", s.Prog))
		os.Symlink(filepath.Join(hostRoot, "lib"), filepath.Join(board, "lib"))
		off, err := handler.Offline(handler.OfflineOptions{CoreFile: core[0], Sysroot: board, Config: config.Default(), Log: handler.NewLogger(io.Discard)})
		if err != nil {
			t.Fatal(err)
		}
		th := rep.Crashed()
		if th == nil || th.Elided < 10000 || tracePCs(rep) != tracePCs(off) {
			t.Errorf("arm recursion: live and offline traces differ (%v), or the recursion is not whole:\nlive:\n%s\noffline:\n%s", tracePCs(rep) != tracePCs(off), tracePCs(rep), tracePCs(off))
		}
		checkSymbols(t, sym, nil)
		return
	}
	want := fixture.OracleSysroot(t, b, core[0], hostRoot)
	cmp := fixture.CompareReport
	switch {
	case c.userArch != "x86_64" && c.userArch != "aarch64" && strings.HasSuffix(b.Variant, "static"):
		cmp = fixture.ComparePrefix // docs/design.md: stripped static ARM/RISC-V
	case c.userArch == "riscv64":
		cmp = fixture.CompareBeyondGDB
	}
	cmp(t, rep, want)
	checkSymbols(t, sym, want)
}

// symResult is the part of `unwound symbolize --format json` checked here.
type symResult struct {
	Threads []struct {
		TID     int  `json:"tid"`
		Crashed bool `json:"crashed"`
		Frames  []struct {
			PC        string `json:"pc"`
			Locations []struct {
				Function string `json:"function"`
				File     string `json:"file"`
				Line     int    `json:"line"`
				Inlined  bool   `json:"inlined"`
				Source   string `json:"source"`
			} `json:"locations"`
		} `json:"frames"`
	} `json:"threads"`
}

// symbolizeJSON runs the host's `unwound symbolize` on a received report,
// with the unstripped programs and the target's libraries under hostRoot.
func symbolizeJSON(t *testing.T, unwound, hostRoot, report string) *symResult {
	t.Helper()
	out, err := exec.Command(unwound, "symbolize", "--format", "json", "--sysroot", hostRoot, report).Output()
	if err != nil {
		t.Fatalf("unwound symbolize: %v", err)
	}
	var r symResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("unwound symbolize: %v", err)
	}
	return &r
}

// checkSymbols: the crashed thread symbolizes to source lines of the crash
// program, and wherever gdb names the function of a frame (the same PC),
// the symbolizer names the same one (the outermost, not inlined, location).
func checkSymbols(t *testing.T, sym *symResult, want *fixture.Trace) {
	t.Helper()
	gdbFn := map[int]map[string]string{} // tid → pc → function
	if want != nil {
		for _, th := range want.Threads {
			gdbFn[th.TID] = map[string]string{}
			for _, f := range th.Frames {
				if f.Function != "" {
					gdbFn[th.TID][f.PC] = f.Function
				}
			}
		}
	}
	lines, same, differ := 0, 0, []string{}
	for _, th := range sym.Threads {
		for _, f := range th.Frames {
			if len(f.Locations) == 0 {
				continue
			}
			outer := f.Locations[len(f.Locations)-1]
			if th.Crashed && outer.Source == "dwarf" && outer.Line > 0 && strings.Contains(outer.File, "crash") {
				lines++
			}
			g, ok := gdbFn[th.TID][f.PC]
			if !ok || outer.Source != "dwarf" {
				continue // gdb's names for libraries come from other tables
			}
			if g == outer.Function || strings.HasPrefix(outer.Function, g+"(") {
				same++
			} else {
				differ = append(differ, fmt.Sprintf("thread %d pc %s: %s, gdb says %s", th.TID, f.PC, outer.Function, g))
			}
		}
	}
	if lines == 0 {
		t.Errorf("the crashed thread has no frame symbolized to a source line of the program")
	}
	if len(differ) > 0 {
		t.Errorf("symbolized functions differ from gdb's:\n%s", strings.Join(differ, "\n"))
	}
	t.Logf("symbolized: %d frames of the crashed thread with source lines, %d function names equal to gdb's", lines, same)
}

func tracePCs(r *report.Report) string {
	var b strings.Builder
	ths := append([]report.Thread(nil), r.Threads...)
	sort.Slice(ths, func(i, j int) bool { return ths[i].TID < ths[j].TID })
	for _, th := range ths {
		for _, f := range th.Frames {
			b.WriteString(f.PC.String() + " ")
		}
		fmt.Fprintf(&b, "| %d\n", th.Elided)
	}
	return b.String()
}

func TestSetTOML(t *testing.T) {
	in := []byte("# c\n[handler]\n# deadline = \"1s\"\ndeadline = \"5s\" # x\n[queue]\ndeadline = \"9s\"\n")
	out, err := SetTOML(in, "handler", "deadline", `"120s"`)
	if err != nil {
		t.Fatal(err)
	}
	want := "# c\n[handler]\n# deadline = \"1s\"\ndeadline = \"120s\"\n[queue]\ndeadline = \"9s\"\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if _, err := SetTOML(in, "upload", "url", `""`); err == nil {
		t.Error("a missing key was added")
	}
	// The shipped configuration has every key the image tests change.
	cfg, err := os.ReadFile(filepath.Join(repoRoot(), "configs", "unwound.toml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := imageConfig(cfg, "/dev/hvc0")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "unwound.toml")
	os.WriteFile(f, got, 0o644)
	c, err := config.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Upload.Transport != "serial" || c.Serial.Port != "/dev/hvc0" || !c.Queue.AllowVolatile || c.Handler.SaveCoreDir == "" {
		t.Errorf("image config: %+v", c)
	}
}
