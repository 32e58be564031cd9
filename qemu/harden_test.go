package qemu

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/qemu/guest"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// The hardening tests (issue 10) in QEMU guests: the handler's footprint
// under a big crash, a FUSE file served by the crashing process itself,
// and a crash in a container. The guest side is qemu/cmd/hardenlab; its
// facts are "HL-…" console lines.

// hardenArch is where the tests run: x86_64 is the fastest guest under
// TCG here. UNWOUND_HARDEN_ARCH=aarch64 (or a comma-separated list) runs
// them on other architectures.
func hardenArches() []string {
	if s := os.Getenv("UNWOUND_HARDEN_ARCH"); s != "" {
		return strings.Split(s, ",")
	}
	return []string{"x86_64"}
}

// hardenLab is what every hardening guest needs.
type hardenLab struct {
	t                             testing.TB
	arch, work                    string
	kernel, init, hardenlab, hndl string
}

func newHardenLab(t *testing.T, arch string) *hardenLab {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a QEMU guest (the hardening tests: -short skips them)")
	}
	work := t.TempDir()
	kernel, err := Kernel(arch)
	if err != nil {
		t.Fatal(err)
	}
	l := &hardenLab{t: t, arch: arch, work: work, kernel: kernel}
	l.init = goBuild(t, "github.com/unwound-dev/unwound/qemu/cmd/guestinit", arch, filepath.Join(work, "init"))
	l.hardenlab = goBuild(t, "github.com/unwound-dev/unwound/qemu/cmd/hardenlab", arch, filepath.Join(work, "hardenlab"))
	// The handler as the Makefile builds it (stripped): its size is part
	// of its resident set.
	l.hndl = goBuild(t, "github.com/unwound-dev/unwound/cmd/unwound-handler", arch, filepath.Join(work, "unwound-handler"), "-ldflags", "-s -w")
	return l
}

// cc compiles a C program for the guest.
func (l *hardenLab) cc(name, src string, flags ...string) string {
	l.t.Helper()
	c := filepath.Join(l.work, name+".c")
	os.WriteFile(c, []byte(src), 0o644)
	out := filepath.Join(l.work, name)
	crossCompile(l.t, l.arch, append([]string{"-O2", "-g", "-pthread", "-o", out, c}, flags...)...)
	return out
}

// initramfs is the guest's root: init, hardenlab, the handler, one
// configuration per mode (the [handler] lines given, the queue on the
// initramfs) and the plan.
func (l *hardenLab) initramfs(plan guest.Plan, handlerTOML map[string]string) *Initramfs {
	r := NewInitramfs()
	r.HostFile("/init", 0o755, l.init)
	r.HostFile("/bin/hardenlab", 0o755, l.hardenlab)
	r.HostFile("/bin/unwound-handler", 0o755, l.hndl)
	for mode, h := range handlerTOML {
		r.File("/etc/unwound/"+mode+".toml", 0o644, []byte(`[handler]
`+h+`
[queue]
dir = "/var/lib/unwound/queue"
allow_volatile = true
[rate_limit]
count = 0
`))
	}
	plan.Steps = append([]guest.Step{{Mkdir: "/var/lib/unwound/queue"}, {Mkdir: "/var/lib/unwound/cores"}}, plan.Steps...)
	plan.Steps = append(plan.Steps, guest.Step{Ship: "/var/lib/unwound/queue/*.json.zst", As: "reports"})
	js, _ := json.Marshal(plan)
	r.File("/plan.json", 0o644, js)
	return r
}

func (l *hardenLab) boot(r *Initramfs, mem string) *Result {
	l.t.Helper()
	m := &Machine{Arch: l.arch, Kernel: l.kernel, Initramfs: r, Memory: mem, Dir: l.work, Timeout: 5 * time.Minute}
	res, err := m.Run(context.Background())
	if res != nil {
		for _, ln := range hlLines(res.Console) {
			l.t.Logf("guest: %s", ln)
		}
	}
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Logf("%s: boot to exit %v", l.arch, res.Duration.Round(time.Millisecond))
	return res
}

// hlLines returns the console's "HL-" lines, without the prefix.
func hlLines(console string) []string { return guest.Facts(console, "HL-") }

// hlFields parses "KEY key=value …" lines starting with prefix.
func hlFields(lines []string, prefix string) []map[string]string {
	var out []map[string]string
	re := regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)
	for _, l := range lines {
		if !strings.HasPrefix(l, prefix+" ") {
			continue
		}
		m := map[string]string{}
		for _, kv := range re.FindAllStringSubmatch(l, -1) {
			v := kv[2]
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			m[kv[1]] = v
		}
		out = append(out, m)
	}
	return out
}

// reports decodes the shipped reports, by pid.
func shippedReports(t *testing.T, res *Result) map[int]*report.Report {
	t.Helper()
	out := map[int]*report.Report{}
	for name, data := range res.Files {
		if !strings.HasPrefix(name, "reports/") {
			continue
		}
		r, err := decode.Report(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[r.PID] = r
		t.Logf("report %s: pid %d, %d bytes compressed", name, r.PID, len(data))
	}
	return out
}

func atoi(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

// bigSrc is the footprint test's program: 64 threads (main and 63 parked a
// few calls deep), 1 GiB of memory touched; a byte on stdin makes the main
// thread write through NULL.
const bigSrc = `
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define THREADS 64
static atomic_int parked;
static void __attribute__((noinline)) park(int depth) {
	if (depth > 0) {
		park(depth - 1);
		__asm__ volatile("");
		return;
	}
	atomic_fetch_add(&parked, 1);
	for (;;) pause();
}
static void *worker(void *a) { park(3 + (int)(long)a % 4); return a; }
static int *volatile nowhere; /* NULL the compiler cannot see */
static void __attribute__((noinline)) crash(void) { *nowhere = 1; }
static void __attribute__((noinline)) wait_then_crash(void) {
	char c;
	if (read(0, &c, 1) == 1) crash();
	__asm__ volatile("");
}
char *volatile keep;
int main(void) {
	size_t n = (size_t)1 << 30;
	char *p = malloc(n);
	if (!p) { perror("malloc"); return 1; }
	memset(p, 1, n);
	keep = p;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 256 << 10);
	for (long i = 1; i < THREADS; i++) {
		pthread_t t;
		if (pthread_create(&t, &at, worker, (void *)i)) { perror("pthread_create"); return 1; }
	}
	while (atomic_load(&parked) < THREADS - 1) usleep(1000);
	printf("threads=%d touched_mib=%zu\n", THREADS, n >> 20);
	fflush(stdout);
	wait_then_crash();
	return 0;
}
`

// Budgets from issue 10.
const (
	budgetRSSKiB    = 10 << 10 // peak RSS of the handler's process tree
	budgetReportLen = 2048     // compressed report bytes
)

// TestHandlerBudget crashes a 64-thread process with 1 GiB touched, once
// with live memory and once from the core stream (live = false), with the
// board's default limits (max_threads 64, stack_window_kib 256,
// memory_limit_mib 32; only the deadline is raised for TCG), the handler
// run through a wrapper that measures its process tree from outside. Per
// mode: the report's max_rss_kib and the wrapper's tree figure (the
// parent's and the child's anonymous pages, the binary's pages once) at
// most 10 MiB, the compressed report at most 2 KiB, every thread present
// with frames.
func TestHandlerBudget(t *testing.T) {
	for _, arch := range hardenArches() {
		arch := arch
		t.Run(arch, func(t *testing.T) { handlerBudget(t, arch) })
	}
}

func handlerBudget(t *testing.T, arch string) {
	if arch == "arm" {
		// fragments/arm.fragment: CONFIG_HIGHMEM=n with VMSPLIT_3G, so the
		// guest's kernel maps about 760 MiB of RAM whatever -m says.
		t.Skip("the minimal 32-bit ARM kernel has no HIGHMEM: its guest cannot hold 1 GiB touched")
	}
	l := newHardenLab(t, arch)
	big := l.cc("big", bigSrc, "-static")
	// MiniDebugInfo (issue 17): the same program built as GCC builds C on
	// ARM and RISC-V by default, without unwind tables for its own code,
	// then stripped as Yocto strips it: once plainly (the baseline) and
	// once with our .gnu_debugdata, which the handler decompresses and
	// whose .debug_frame unwinds the 64 threads. Live mode, same boot.
	notables := l.cc("big-notables", bigSrc, "-static", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
	plain, withMDI := filepath.Join(l.work, "big-plain"), filepath.Join(l.work, "big-mdi")
	strip := map[string]string{"arm": "arm-linux-gnueabihf-", "aarch64": "aarch64-linux-gnu-", "riscv64": "riscv64-linux-gnu-"}[arch] + "strip"
	testutil.Run(t, strip, "--remove-section=.comment", "--remove-section=.note", "-o", plain, notables)
	unwound, err := HostUnwound(l.work)
	if err != nil {
		t.Fatal(err)
	}
	if err := AddMiniDebugInfo(unwound, arch, notables, plain, withMDI); err != nil {
		t.Fatal(err)
	}
	live := "deadline = \"120s\"\nfreeze_budget = \"60s\""
	modes := map[string]string{
		"live":       live,
		"stream":     live + "\nlive = false",
		"live-plain": live,
		"live-mdi":   live,
	}
	r := l.initramfs(guest.Plan{Steps: []guest.Step{
		{Run: []string{"/bin/hardenlab", "budget", "/bin/big", "live", "stream"}, MustSucceed: true},
		{Run: []string{"/bin/hardenlab", "budget", "/bin/big-plain", "live-plain"}, MustSucceed: true},
		{Run: []string{"/bin/hardenlab", "budget", "/bin/big-mdi", "live-mdi"}, MustSucceed: true},
	}}, modes)
	r.HostFile("/bin/big", 0o755, big)
	r.HostFile("/bin/big-plain", 0o755, plain)
	r.HostFile("/bin/big-mdi", 0o755, withMDI)
	res := l.boot(r, "1536M")
	reps := shippedReports(t, res)
	lens := map[int]int{}
	for name, data := range res.Files {
		if rp, err := decode.Report(data); err == nil && strings.HasPrefix(name, "reports/") {
			lens[rp.PID] = len(data)
		}
	}
	lines := hlFields(hlLines(res.Console), "BUDGET")
	if len(lines) != 4 {
		t.Fatalf("%d BUDGET lines, want 4", len(lines))
	}
	byMode := map[string]*report.Report{}
	tree := map[string]int64{} // the wrapper's tree peak, binary once
	for _, m := range lines {
		mode := m["mode"]
		pid := int(atoi(m["pid"]))
		rep := reps[pid]
		if rep == nil {
			t.Errorf("%s: no report for pid %d", mode, pid)
			continue
		}
		byMode[mode] = rep
		if want, _, _ := strings.Cut(mode, "-"); rep.Handler.Mode != want {
			t.Errorf("%s: report mode %q (errors %v)", mode, rep.Handler.Mode, rep.Errors)
		}
		frames := 0
		for _, th := range rep.Threads {
			frames += len(th.Frames)
			if len(th.Frames) < 2 && mode != "live-plain" { // no tables, no symbols: may stop early
				t.Errorf("%s: thread %d has %d frames (%s %s)", mode, th.TID, len(th.Frames), th.StopReason, th.StopDetail)
			}
		}
		if len(rep.Threads) != 64 || rep.Partial {
			t.Errorf("%s: %d threads, partial %v, errors %v", mode, len(rep.Threads), rep.Partial, rep.Errors)
		}
		sampled, hwm, ru, once := atoi(m["sampled_tree_kib"]), atoi(m["hwm_sum_kib"]), atoi(m["rusage_max_kib"]), atoi(m["binary_once_kib"])
		t.Logf("%s %s: report max_rss_kib %d (budget %d, margin %d); wrapper: tree peak %d KiB with the binary's pages once (anonymous %s + binary %s at the sampled peak, the binary counted per process), sampled sum of VmRSS %d KiB, sum of VmHWM %d KiB over %s processes, largest process %d KiB; report %d bytes compressed (budget %d, margin %d); %d threads, %d frames; frozen %d ms, handler %d ms, crash to reap %s ms",
			arch, mode, rep.Handler.MaxRSSKiB, budgetRSSKiB, budgetRSSKiB-rep.Handler.MaxRSSKiB, once, m["anon_kib"], m["file_kib"], sampled, hwm, m["procs"], ru,
			lens[pid], budgetReportLen, budgetReportLen-lens[pid], len(rep.Threads), frames, rep.Handler.FrozenMS, rep.Handler.DurationMS, m["reap_ms"])
		if rep.Handler.MaxRSSKiB <= 0 || rep.Handler.MaxRSSKiB > budgetRSSKiB {
			t.Errorf("%s: report max_rss_kib %d, budget %d", mode, rep.Handler.MaxRSSKiB, budgetRSSKiB)
		}
		// The report's figure covers the whole tree: never below what
		// the wrapper saw of its largest process.
		if ru > rep.Handler.MaxRSSKiB {
			t.Errorf("%s: report max_rss_kib %d below the largest process's peak %d (wait4)", mode, rep.Handler.MaxRSSKiB, ru)
		}
		// From outside: the parent and the child map one binary, whose
		// pages are in memory once; everything else they hold is their
		// own. (The plain sums, which count the binary twice, are
		// logged above.)
		if once <= 0 || once > budgetRSSKiB {
			t.Errorf("%s: handler tree at %d KiB (binary's pages once); budget %d", mode, once, budgetRSSKiB)
		}
		if lens[pid] > budgetReportLen {
			t.Errorf("%s: report %d bytes compressed, budget %d", mode, lens[pid], budgetReportLen)
		}
		tree[mode] = once
	}
	rPlain, rMDI := byMode["live-plain"], byMode["live-mdi"]
	if rPlain == nil || rMDI == nil {
		return
	}
	// What reading MiniDebugInfo costs, against the plain strip of the
	// same program in the same boot.
	methods := func(r *report.Report) map[string]int {
		n := map[string]int{}
		for _, th := range r.Threads {
			for _, f := range th.Frames {
				n[f.Method]++
			}
		}
		return n
	}
	ratio := func(a, b int64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", float64(a)/float64(b))
	}
	t.Logf("%s MiniDebugInfo vs plain strip (live): report max_rss_kib %d / %d (ratio %s); tree peak %d / %d KiB (ratio %s); handler %d / %d ms (ratio %s); frozen %d / %d ms (ratio %s); frames by method %v / %v",
		arch, rMDI.Handler.MaxRSSKiB, rPlain.Handler.MaxRSSKiB, ratio(rMDI.Handler.MaxRSSKiB, rPlain.Handler.MaxRSSKiB),
		tree["live-mdi"], tree["live-plain"], ratio(tree["live-mdi"], tree["live-plain"]),
		rMDI.Handler.DurationMS, rPlain.Handler.DurationMS, ratio(rMDI.Handler.DurationMS, rPlain.Handler.DurationMS),
		rMDI.Handler.FrozenMS, rPlain.Handler.FrozenMS, ratio(rMDI.Handler.FrozenMS, rPlain.Handler.FrozenMS),
		methods(rMDI), methods(rPlain))
	// The .debug_frame it carries unwound the program's own code.
	var own int
	for _, th := range rMDI.Threads {
		for _, f := range th.Frames {
			if f.Method == "cfi" && f.Module >= 0 && f.Module < len(rMDI.Modules) && rMDI.Modules[f.Module].Path == "/bin/big-mdi" {
				own++
			}
		}
	}
	if own < 64 {
		t.Errorf("MiniDebugInfo: %d cfi frames in the program, want at least one per thread", own)
	}
}

// TestFUSEHang: a process serves a FUSE mount itself, maps a file from it
// PROT_EXEC and crashes with its PC in that mapping; while it is dumped
// its server thread is frozen, and a holder keeps the connection open
// without answering, so any open or read of the file blocks for ever.
// With a short deadline, in live and stream mode: the handler stores a
// report within its deadline naming the module's timeout, exits, and the
// crashed process is reaped; no handler is left (nor ever in D state).
func TestFUSEHang(t *testing.T) {
	for _, arch := range hardenArches() {
		arch := arch
		t.Run(arch, func(t *testing.T) { fuseHang(t, arch) })
	}
}

const fuseDeadline = 8 * time.Second

func fuseHang(t *testing.T, arch string) {
	l := newHardenLab(t, arch)
	d := fmt.Sprintf("deadline = %q\n", fuseDeadline.String())
	r := l.initramfs(guest.Plan{Steps: []guest.Step{
		{Run: []string{"/bin/hardenlab", "fuse", "live", "stream"}, MustSucceed: true},
	}}, map[string]string{"live": d, "stream": d + "live = false"})
	res := l.boot(r, "256M")
	reps := shippedReports(t, res)
	lines := hlFields(hlLines(res.Console), "FUSE")
	if len(lines) != 2 {
		t.Fatalf("%d FUSE lines, want 2", len(lines))
	}
	grace := fuseDeadline + 4*time.Second // the hard deadline is 2 s past it
	for _, m := range lines {
		mode := m["mode"]
		t.Logf("%s %s: %v", arch, mode, m)
		if m["reaped"] != "true" || m["report"] != "true" || m["handler_gone"] != "true" || m["dstate"] != "false" || m["left"] != "0" {
			t.Errorf("%s: %v", mode, m)
		}
		if ms := atoi(m["handler_gone_ms"]); time.Duration(ms)*time.Millisecond > grace {
			t.Errorf("%s: the handler was gone %d ms after the crash, deadline %v", mode, ms, fuseDeadline)
		}
		if ms := atoi(m["reap_ms"]); time.Duration(ms)*time.Millisecond > grace {
			t.Errorf("%s: the crash was reaped after %d ms, deadline %v", mode, ms, fuseDeadline)
		}
		rep := reps[int(atoi(m["pid"]))]
		if rep == nil {
			t.Errorf("%s: no report for pid %s", mode, m["pid"])
			continue
		}
		if rep.Handler.Mode != mode {
			t.Errorf("%s: report mode %q, errors %v", mode, rep.Handler.Mode, rep.Errors)
		}
		if time.Duration(rep.Handler.DurationMS)*time.Millisecond > fuseDeadline {
			t.Errorf("%s: the handler took %d ms, deadline %v", mode, rep.Handler.DurationMS, fuseDeadline)
		}
		var fm *report.Module
		for i := range rep.Modules {
			if strings.HasPrefix(rep.Modules[i].Path, "/mnt/fuse-") {
				fm = &rep.Modules[i]
			}
		}
		ct := rep.Crashed()
		switch {
		case ct == nil || len(ct.Frames) == 0:
			t.Errorf("%s: no crashed thread", mode)
		case fm == nil:
			t.Errorf("%s: no module on the FUSE mount: %+v", mode, rep.Modules)
		case !strings.Contains(fm.Error, "timed out") && !rep.Partial:
			t.Errorf("%s: the FUSE module's error %q does not say it timed out, and the report is not partial", mode, fm.Error)
		default:
			pc := uint64(ct.Frames[0].PC)
			if pc < uint64(fm.Start) || pc >= uint64(fm.End) || rep.Modules[ct.Frames[0].Module].Path != fm.Path {
				t.Errorf("%s: crash PC %#x not in the FUSE mapping %v-%v", mode, pc, fm.Start, fm.End)
			}
			t.Logf("%s: %s: error %q; crashed thread %d frames, stop %s; signal %s; %d ms", mode, fm.Path, fm.Error, len(ct.Frames), ct.StopReason, rep.Signal.Name, rep.Handler.DurationMS)
		}
	}
}

// ctSrc is the container's program: a worker thread waits for a byte on
// stdin and writes through NULL three calls deep.
const ctSrc = `
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static int *volatile nowhere; /* NULL the compiler cannot see */
static void __attribute__((noinline)) null_write(void) { *nowhere = 1; }
static void __attribute__((noinline)) step2(void) { null_write(); __asm__ volatile(""); }
static void __attribute__((noinline)) step1(void) { step2(); __asm__ volatile(""); }
static void *worker(void *a) {
	char c;
	if (read(0, &c, 1) == 1) step1();
	return a;
}
int main(void) {
	pthread_t t;
	pthread_create(&t, 0, worker, 0);
	printf("ready pid %d in its namespace\n", getpid());
	fflush(stdout);
	pthread_join(t, 0);
	return 0;
}
`

// otherBuildID copies an ELF file with its GNU build ID changed (every
// byte inverted): the same code, another identity. It returns the new ID.
func otherBuildID(t *testing.T, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		t.Fatalf("%s: no build ID note", src)
	}
	off := s.Offset
	le := binary.LittleEndian
	namesz, descsz := le.Uint32(b[off:]), le.Uint32(b[off+4:])
	desc := off + 12 + uint64((namesz+3)&^3)
	for i := desc; i < desc+uint64(descsz); i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[desc : desc+uint64(descsz)])
}

func gnuBuildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := f.Section(".note.gnu.build-id").Data()
	if err != nil {
		t.Fatal(err)
	}
	namesz := binary.LittleEndian.Uint32(d)
	return hex.EncodeToString(d[12+(namesz+3)&^3:])
}

// TestContainerCrash: a program in its own pid and mount namespaces,
// chrooted into a root holding its own copies of its libraries (other
// build IDs, at paths the guest's root does not have: /ctlib/ld.so,
// /ctlib/libc.so.6, /app/ct), crashes in a second thread after the test
// planted symlinks over its mapped program and libc (an absolute one and
// one climbing with ".."), pointing at a decoy and, were they resolved in
// the handler's root, at the guest's own secret file. In live and stream
// mode: the report's pid and tid are the global ids (%P, %I), and so are
// its threads' ids; module paths are the container's, their build IDs
// the container's files'; the trace equals gdb-multiarch's on the saved
// core with the container's root as sysroot; inotify saw no open or read
// of the secret, the decoy or the guest's own libc.
func TestContainerCrash(t *testing.T) {
	for _, arch := range hardenArches() {
		arch := arch
		t.Run(arch, func(t *testing.T) { containerCrash(t, arch) })
	}
}

func containerCrash(t *testing.T, arch string) {
	l := newHardenLab(t, arch)
	libs, ok := libsFor[arch]
	if !ok {
		t.Skipf("no glibc layout for %s", arch)
	}
	host := filepath.Join(l.work, "ctroot") // the container's root on the host, for gdb
	for _, d := range []string{"app", "ctlib", "etc"} {
		os.MkdirAll(filepath.Join(host, d), 0o755)
	}
	ct := l.cc("ct", ctSrc, "-Wl,--dynamic-linker=/ctlib/ld.so", "-Wl,-rpath,/ctlib")
	os.Link(ct, filepath.Join(host, "app", "ct"))
	hostLib := func(n string) string {
		p, err := filepath.EvalSymlinks(filepath.Join(libs.hostDir, n))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := map[string]string{ // container path → build ID
		"/app/ct":          gnuBuildID(t, ct),
		"/ctlib/ld.so":     otherBuildID(t, hostLib(libs.interp), filepath.Join(host, "ctlib", "ld.so")),
		"/ctlib/libc.so.6": otherBuildID(t, hostLib("libc.so.6"), filepath.Join(host, "ctlib", "libc.so.6")),
	}
	genuine := gnuBuildID(t, hostLib("libc.so.6"))
	if want["/ctlib/libc.so.6"] == genuine {
		t.Fatal("the container's libc has the genuine build ID")
	}
	os.WriteFile(filepath.Join(host, "etc", "hl-secret"), []byte("decoy inside the container\n"), 0o644)
	d := "deadline = \"60s\"\nfreeze_budget = \"30s\"\nsave_core_dir = \"/var/lib/unwound/cores\"\n"
	r := l.initramfs(guest.Plan{Steps: []guest.Step{
		{Run: []string{"/bin/hardenlab", "container", "live", "stream"}, MustSucceed: true},
		{Ship: "/var/lib/unwound/cores/*", As: "cores"},
	}}, map[string]string{"live": d, "stream": d + "live = false"})
	if err := r.HostTree(host, "/ctsrc"); err != nil {
		t.Fatal(err)
	}
	// The guest's own files at the paths a confused handler would open.
	r.File("/etc/hl-secret", 0o600, []byte("the guest's secret\n"))
	r.HostFile("/lib/libc.so.6", 0o755, hostLib("libc.so.6"))
	res := l.boot(r, "256M")
	reps := shippedReports(t, res)
	lines := hlLines(res.Console)
	ready := hlFields(lines, "CT-READY")
	done := hlFields(lines, "CT")
	if len(ready) != 2 || len(done) != 2 {
		t.Fatalf("%d CT-READY and %d CT lines, want 2 each", len(ready), len(done))
	}
	coreDir := filepath.Join(l.work, "cores")
	os.MkdirAll(coreDir, 0o755)
	for name, data := range res.Files {
		if strings.HasPrefix(name, "cores/") {
			os.WriteFile(filepath.Join(l.work, name), data, 0o644)
		}
	}
	for i, m := range ready {
		mode := m["mode"]
		gpid := int(atoi(m["pid"]))
		t.Logf("%s %s: %v; %v", arch, mode, m, done[i])
		if done[i]["outside_access"] != "" {
			t.Errorf("%s: files outside the module set were opened or read: %s", mode, done[i]["outside_access"])
		}
		// Global tid → tid in the container.
		toNS := map[int]int{}
		for _, p := range strings.Split(m["tids"], ",") {
			g, n, _ := strings.Cut(p, ":")
			toNS[int(atoi(g))] = int(atoi(n))
		}
		if toNS[gpid] != 1 {
			t.Errorf("%s: the container's main thread is %d in its namespace, want 1", mode, toNS[gpid])
		}
		rep := reps[gpid]
		if rep == nil {
			t.Errorf("%s: no report for global pid %d (reports for %v)", mode, gpid, keys(reps))
			continue
		}
		if rep.Handler.Mode != mode {
			t.Errorf("%s: report mode %q, errors %v", mode, rep.Handler.Mode, rep.Errors)
		}
		// The crashing thread is the worker: its global tid is the one
		// that is not the pid.
		var worker int
		for g := range toNS {
			if g != gpid {
				worker = g
			}
		}
		if rep.TID != worker {
			t.Errorf("%s: report tid %d, want the worker's global tid %d", mode, rep.TID, worker)
		}
		var tids []int
		for _, th := range rep.Threads {
			tids = append(tids, th.TID)
			if _, ok := toNS[th.TID]; !ok {
				t.Errorf("%s: thread %d is not a global tid of the process (%v)", mode, th.TID, toNS)
			}
		}
		if ct := rep.Crashed(); ct == nil || ct.TID != rep.TID {
			t.Errorf("%s: the crashed thread is not tid %d: %v", mode, rep.TID, tids)
		}
		if exe := strings.TrimSuffix(rep.Exe, " (deleted)"); exe != "/app/ct" {
			t.Errorf("%s: exe %q, want the container's /app/ct", mode, rep.Exe)
		}
		seen := map[string]bool{}
		for _, mod := range rep.Modules {
			t.Logf("%s: module %s build ID %s %s", mode, mod.Path, mod.BuildID, mod.Error)
			p := strings.TrimSuffix(mod.Path, " (deleted)")
			if strings.HasPrefix(p, "[") {
				continue
			}
			id, ok := want[p]
			switch {
			case !ok:
				t.Errorf("%s: module %q is not one of the container's files", mode, mod.Path)
			case mod.BuildID != id:
				t.Errorf("%s: %s: build ID %q (error %q), the container's file has %s (the guest's libc: %s)", mode, p, mod.BuildID, mod.Error, id, genuine)
			}
			seen[p] = true
		}
		for _, p := range []string{"/app/ct", "/ctlib/libc.so.6"} {
			if !seen[p] {
				t.Errorf("%s: no module %s in the report", mode, p)
			}
		}
		// gdb on the saved core, the container's root as sysroot. The
		// core's thread ids are the container's.
		cores, _ := filepath.Glob(filepath.Join(coreDir, fmt.Sprintf("core.%d.*", gpid)))
		if len(cores) != 1 {
			t.Errorf("%s: %d saved cores for pid %d", mode, len(cores), gpid)
			continue
		}
		b := fixture.Binary{Arch: arch, Variant: "app", Prog: "ct", Dir: host}
		gdbTrace := fixture.OracleSysroot(t, b, cores[0], host)
		local := *rep
		local.Threads = nil
		for _, th := range rep.Threads {
			th.TID = toNS[th.TID]
			local.Threads = append(local.Threads, th)
		}
		fixture.CompareReport(t, &local, gdbTrace)
		if th := rep.Crashed(); th != nil {
			t.Logf("%s: crashed thread %d (tid %d in the container): %d frames, stop %s", mode, th.TID, toNS[th.TID], len(th.Frames), th.StopReason)
		}
	}
}

func keys(m map[int]*report.Report) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
