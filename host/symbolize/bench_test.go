package symbolize

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// threads64 is the benchmarks' report: testdata/threads64.c built -O2
// for the host, crashed, and reported by the handler's offline mode, with
// the options that find its debug files (the program's in a build-id
// tree, the host's libc6-dbg in /usr/lib/debug).
func threads64(b *testing.B) (*report.Report, Options) {
	testutil.Need(b, "gcc", "strip", "objcopy")
	arch := hostArch()
	src, _ := filepath.Abs(filepath.Join("testdata", "threads64.c"))
	text, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(text)
	root := filepath.Join(fixture.CacheDir(), "bench-symbolize", hex.EncodeToString(sum[:6]))
	bin := fixture.Binary{Arch: arch, Variant: "O2-dynamic", Prog: "threads64", Dir: filepath.Join(root, arch)}
	if _, err := os.Stat(bin.Stripped()); err != nil {
		os.MkdirAll(filepath.Dir(bin.Stripped()), 0o755)
		testutil.Run(b, "gcc", "-g", "-O2", "-pthread", "-Wl,--build-id", "-o", bin.Unstripped(), src)
		testutil.Run(b, "strip", "--remove-section=.comment", "--remove-section=.note", "-o", bin.Stripped()+".tmp", bin.Unstripped())
		if err := os.Rename(bin.Stripped()+".tmp", bin.Stripped()); err != nil {
			b.Fatal(err)
		}
	}
	r := crashReport(b, bin, "bench")
	if len(r.Threads) != 64 {
		b.Fatalf("%d threads in the report, want 64", len(r.Threads))
	}
	debugDir := b.TempDir()
	buildIDTree(b, debugDir, bin.Unstripped())
	opts := Options{DebugDirs: []string{debugDir}, Sysroot: fixture.Sysroot(arch)}
	if st, err := os.Stat("/usr/lib/debug/.build-id"); err == nil && st.IsDir() && arch == "x86_64" {
		opts.DebugDirs = append(opts.DebugDirs, "/usr/lib/debug")
	}
	return r, opts
}

func countFrames(r *report.Report) int {
	n := 0
	for _, th := range r.Threads {
		n += len(th.Frames)
	}
	return n
}

func checkNamed(b *testing.B, res *Result) {
	for _, th := range res.Threads {
		for _, f := range th.Frames {
			if f.Module >= 0 && len(f.Locations) == 0 {
				b.Fatalf("frame %v not symbolized: %s", f.PC, f.Error)
			}
		}
	}
}

// BenchmarkSymbolize64Threads symbolizes a real report with 64 threads
// (testdata/threads64.c crashed on the host, its report made by the
// handler's offline mode from the core): cold, a new Symbolizer each time
// (debug files found, opened, verified, DWARF indexed), and cached, one
// Symbolizer for every run (files and indexes kept), both in every
// iteration (the cached run 10 times, after a GC, so the cold run's
// garbage is not billed to it). It reports frames per second for each and
// the cached figure as a ratio to cold.
func BenchmarkSymbolize64Threads(b *testing.B) {
	const cachedRuns = 10
	r, opts := threads64(b)
	frames := countFrames(r)
	cachedS := New(opts)
	defer cachedS.Close()
	checkNamed(b, cachedS.Symbolize(r))
	b.ResetTimer()
	var cold, cached time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s := New(opts)
		res := s.Symbolize(r)
		s.Close()
		cold += time.Since(t0)
		if len(res.Threads) != 64 {
			b.Fatal("threads lost")
		}
		runtime.GC()
		t1 := time.Now()
		for k := 0; k < cachedRuns; k++ {
			cachedS.Symbolize(r)
		}
		cached += time.Since(t1)
	}
	b.StopTimer()
	n := float64(frames) * float64(b.N)
	b.ReportMetric(n/cold.Seconds(), "cold-frames/s")
	b.ReportMetric(n*cachedRuns/cached.Seconds(), "cached-frames/s")
	b.ReportMetric(cold.Seconds()*cachedRuns/cached.Seconds(), "cached/cold")
	b.ReportMetric(float64(frames), "frames")
}

// usage is a child process's CPU time and peak resident memory.
type usage struct {
	cpu time.Duration
	rss int64 // bytes
}

// measure runs a command under testdata/rusage.c (built as launcher)
// and returns the command's rusage: user+system time and ru_maxrss.
func measure(b *testing.B, launcher string, env []string, stdin []byte, name string, args ...string) usage {
	b.Helper()
	cmd := exec.Command(launcher, append([]string{name}, args...)...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s %s: %v\n%.2000s", name, strings.Join(args, " "), err, errb.String())
	}
	var us, kib int64
	i := strings.LastIndex(errb.String(), "rusage ")
	if i < 0 {
		b.Fatalf("%s: no rusage line: %s", name, errb.String())
	}
	if _, err := fmt.Sscanf(errb.String()[i:], "rusage %d %d", &us, &kib); err != nil {
		b.Fatal(err)
	}
	return usage{time.Duration(us) * time.Microsecond, kib << 10}
}

// BenchmarkColdProcess is the measure of a cold symbolization:
// one process per run, on the 64-thread report, against the tools a user
// would reach for on the same PCs with the same debug files, all in one
// run: `unwound symbolize` (with an empty index cache, then warm, with the
// on-disk index the cold run left), `addr2line -f -i -C -e FILE` once per
// module (CPU summed, peak memory the largest), and `llvm-symbolizer
// --inlining` once with every module. It prints CPU time and peak RSS
// (rusage of the child) and the ratios. UNWOUND_BENCH_BEFORE names
// another unwound binary (say, an earlier commit's) to measure beside.
func BenchmarkColdProcess(b *testing.B) {
	testutil.Need(b, "go", "addr2line")
	llvm := ""
	for _, n := range []string{"llvm-symbolizer", "llvm-symbolizer-14", "llvm-symbolizer-15", "llvm-symbolizer-16"} {
		if p, err := exec.LookPath(n); err == nil {
			llvm = p
			break
		}
	}
	r, opts := threads64(b)
	s := New(opts)
	res := s.Symbolize(r)
	s.Close()
	checkNamed(b, res)

	work := b.TempDir()
	js, err := r.MarshalIndent()
	if err != nil {
		b.Fatal(err)
	}
	rep := filepath.Join(work, "report.json")
	if err := os.WriteFile(rep, js, 0o644); err != nil {
		b.Fatal(err)
	}
	tool := filepath.Join(work, "unwound")
	testutil.Run(b, "go", "build", "-o", tool, "../../cmd/unwound")

	// The same PCs per module, from the same debug files.
	perModule := map[string][]string{}
	var llvmIn strings.Builder
	for _, th := range res.Threads {
		for _, f := range th.Frames {
			if f.Module < 0 || f.Addr == nil {
				continue
			}
			file := res.Modules[f.Module].DebugFile
			if file == "" {
				b.Fatalf("module %s has no debug file", res.Modules[f.Module].Path)
			}
			a := fmt.Sprintf("%#x", uint64(*f.Addr))
			perModule[file] = append(perModule[file], a)
			fmt.Fprintf(&llvmIn, "%s %s\n", file, a)
		}
	}
	files := make([]string, 0, len(perModule))
	for f := range perModule {
		files = append(files, f)
	}
	sort.Strings(files)

	args := []string{"symbolize", "--format", "json", "--sysroot", opts.Sysroot}
	for _, d := range opts.DebugDirs {
		args = append(args, "--debug-dir", d)
	}
	args = append(args, rep)
	launcher := filepath.Join(work, "rusage")
	testutil.Run(b, "gcc", "-O2", "-o", launcher, filepath.Join("testdata", "rusage.c"))
	runUnwound := func(bin, cache string) usage {
		return measure(b, launcher, append(os.Environ(), "UNWOUND_CACHE="+cache), nil, bin, args...)
	}
	before := os.Getenv("UNWOUND_BENCH_BEFORE")
	var cold, warm, old, a2l, llv usage
	add := func(sum *usage, u usage) {
		sum.cpu += u.cpu
		if u.rss > sum.rss {
			sum.rss = u.rss
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cache := filepath.Join(work, fmt.Sprint("cache", i))
		add(&cold, runUnwound(tool, cache))
		add(&warm, runUnwound(tool, cache))
		if before != "" {
			add(&old, runUnwound(before, cache))
		}
		for _, f := range files {
			add(&a2l, measure(b, launcher, nil, nil, "addr2line", append([]string{"-f", "-i", "-C", "-e", f}, perModule[f]...)...))
		}
		if llvm != "" {
			add(&llv, measure(b, launcher, nil, []byte(llvmIn.String()), llvm, "--inlining"))
		}
	}
	b.StopTimer()
	n := float64(b.N)
	ms := func(u usage) float64 { return u.cpu.Seconds() * 1000 / n }
	mib := func(u usage) float64 { return float64(u.rss) / (1 << 20) }
	b.ReportMetric(float64(countFrames(r)), "frames")
	b.ReportMetric(ms(cold), "cold-cpu-ms")
	b.ReportMetric(ms(warm), "warm-cpu-ms")
	b.ReportMetric(ms(a2l), "addr2line-cpu-ms")
	b.ReportMetric(ms(cold)/ms(a2l), "cold/addr2line-cpu")
	b.ReportMetric(mib(cold), "cold-MiB")
	b.ReportMetric(mib(warm), "warm-MiB")
	b.ReportMetric(mib(a2l), "addr2line-MiB")
	if llvm != "" {
		b.ReportMetric(ms(llv), "llvm-cpu-ms")
		b.ReportMetric(mib(llv), "llvm-MiB")
		b.ReportMetric(mib(cold)/mib(llv), "cold/llvm-rss")
	}
	if before != "" {
		b.ReportMetric(ms(old), "before-cpu-ms")
		b.ReportMetric(mib(old), "before-MiB")
	}
}
