package handler

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestWildAgainstGDB measures the unwinder on programs nobody here built
// or chose the crash point of: Debian bookworm's own arm64 and armhf
// (Thumb-2) packages, stripped as shipped (scripts/wild-get.sh), each run
// under qemu-user on a CPU-heavy load and killed after a random delay, so
// that the PC lands anywhere in the program, its libraries or the dynamic
// loader. gdb walks the same core with the same binaries and libc6-dbg.
// Per program and arch it prints, over every thread, the frames equal to
// gdb's, the wrong ones (another PC at the same depth) by method and
// trust, those missing (the trace ends earlier) and those past gdb's
// last; it fails on any wrong frame at high or medium trust. Opt-in
// (UNWOUND_WILD=1): it fetches packages and makes cores, both cached
// under ~/.cache/unwound/wild; UNWOUND_WILD_CORES sets the cores per load
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
	for _, arch := range []string{"aarch64", "arm"} {
		t.Run(arch, func(t *testing.T) {
			testutil.Need(t, "qemu-"+arch)
			dir := strings.TrimSpace(string(testutil.Run(t, filepath.Join(fixture.Root(), "scripts", "wild-get.sh"), arch)))
			if i := strings.LastIndexByte(dir, '\n'); i >= 0 {
				dir = dir[i+1:] // the last line; apt's log comes before
			}
			root := filepath.Join(dir, "root")
			for _, l := range wildLoads {
				for i := 0; i < n; i++ {
					name := fmt.Sprintf("%s-%d", l.name, i)
					core := wildCore(t, arch, dir, l, i)
					if core == "" {
						continue
					}
					b := fixture.Binary{Arch: arch, Dir: root, Prog: l.prog, DebugDir: filepath.Join(dir, "debug")}
					want, err := fixture.TryOracle(t, b, core, root)
					if err != nil {
						t.Logf("%s: no oracle: %.300v", name, err)
						continue
					}
					got := offlineReport(t, OfflineOptions{CoreFile: core, Sysroot: root, Exe: b.Unstripped()})
					fig := rows[arch+"/"+l.name]
					if fig == nil {
						fig = &fixture.Figures{}
						rows[arch+"/"+l.name] = fig
					}
					ex := extra[arch+"/"+l.name]
					if ex == nil {
						ex = &wildExtra{past: map[string]int{}}
						extra[arch+"/"+l.name] = ex
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

// A wildLoad is one program of the packages busy on a CPU-heavy task
// long enough (seconds under qemu-user) for any delay to stop it midway.
type wildLoad struct {
	name, prog string
	args       []string // "DATA" is the compressible input file
	stdin      string
}

var wildLoads = []wildLoad{
	{"sqlite3-cte", "usr/bin/sqlite3", []string{":memory:", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<100000000) SELECT sum(x*x%7) FROM c;"}, ""},
	{"sqlite3-index", "usr/bin/sqlite3", []string{":memory:", "CREATE TABLE t AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<3000000) SELECT x, hex(randomblob(8)) AS h FROM c; CREATE INDEX i ON t(h); SELECT count(*), max(h) FROM t GROUP BY substr(h,1,3) ORDER BY 2 DESC;"}, ""},
	{"busybox-awk", "bin/busybox", []string{"awk", `BEGIN{for(i=0;i<100000000;i++){s+=i%7; t=t substr("abc",1+i%3,1); if(length(t)>100)t=""} print s}`}, ""},
	{"busybox-gzip", "bin/busybox", []string{"gzip", "-9", "-c", "DATA", "DATA", "DATA", "DATA", "DATA", "DATA"}, ""},
	{"busybox-bc", "bin/busybox", []string{"bc", "-l"}, "scale=2000; 4*a(1)\n"},
	{"xz", "usr/bin/xz", []string{"-9", "-T1", "-c", "DATA"}, ""},
	{"xz-threads", "usr/bin/xz", []string{"-6", "-T2", "-c", "DATA"}, ""},
	{"zstd", "usr/bin/zstd", []string{"-19", "-c", "DATA"}, ""},
	{"zstd-threads", "usr/bin/zstd", []string{"-15", "-T2", "-c", "DATA"}, ""},
	{"gawk-math", "usr/bin/gawk", []string{`BEGIN{for(i=0;i<100000000;i++) s+=sin(i)*log(i+1); print s}`}, ""},
	{"gawk-string", "usr/bin/gawk", []string{`BEGIN{for(i=0;i<100000000;i++){s=sprintf("k%d",i*7); gsub(/7/,"x",s); a[s]=i; if(i%1000==0) delete a} print length(a)}`}, ""},
	{"bc", "usr/bin/bc", []string{"-l"}, "scale=5000; 4*a(1)\n"},
	{"lua-fib", "usr/bin/lua5.3", []string{"-e", "local function f(n) if n<2 then return n end return f(n-1)+f(n-2) end print(f(45))"}, ""},
	{"lua-string", "usr/bin/lua5.3", []string{"-e", `local t={} for i=1,1e9 do t[#t+1]=string.format("%x",i) if #t>1000 then t={} end end`}, ""},
	{"python-fib", "usr/bin/python3.11", []string{"-S", "-c", "def f(n): return n if n<2 else f(n-1)+f(n-2)\nprint(f(45))"}, ""},
	{"python-dict", "usr/bin/python3.11", []string{"-S", "-c", "d={}\nfor i in range(10**9): d[str(i*7)[-5:]]=i"}, ""},
}

// wildCore is the core of load l's i-th run on arch, made once and kept
// under wild/cores/<arch>, keyed by the packages' versions and the load: qemu-user
// runs it with the libraries of dir/root, and SIGQUIT (which dumps core
// and, unlike SIGSEGV, none of the programs catch: zstd and gawk do)
// stops it after a delay drawn from the load's name and i. "" when the program ended first (logged).
func wildCore(t *testing.T, arch, dir string, l wildLoad, i int) string {
	t.Helper()
	versions, err := os.ReadFile(filepath.Join(dir, "versions"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n%q\n%q\nSIGQUIT\n", versions, l.prog, l.args, l.stdin)
	// Beside the packages, not under them: a new fetch keeps the cores.
	cores := filepath.Join(filepath.Dir(dir), "cores", arch)
	path := filepath.Join(cores, fmt.Sprintf("%s-%d-%s.core", l.name, i, hex.EncodeToString(h.Sum(nil))[:12]))
	unlock, err := fixture.LockDir(cores)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return path
	}
	data := wildData(t, cores)
	work, err := os.MkdirTemp(cores, "run-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	root := filepath.Join(dir, "root")
	cpu := map[string]string{"aarch64": "cortex-a72", "arm": "cortex-a15"}[arch] // as fixture.Core
	args := []string{"-c", `ulimit -c unlimited; exec "$@"`, "sh", "qemu-" + arch, "-cpu", cpu, "-L", root, filepath.Join(root, l.prog)}
	for _, a := range l.args {
		args = append(args, strings.ReplaceAll(a, "DATA", data))
	}
	cmd := exec.Command("sh", args...)
	cmd.Dir = work
	cmd.Stdin = strings.NewReader(l.stdin)
	var out bytes.Buffer
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := fnv.New64a()
	fmt.Fprintf(f, "%s/%s/%d", arch, l.name, i)
	rng := rand.New(rand.NewSource(int64(f.Sum64())))
	delay := 300*time.Millisecond + time.Duration(rng.Int63n(int64(2700*time.Millisecond)))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("%s/%s-%d ended before the %v delay (%v): no core\n%.500s", arch, l.name, i, delay, err, out.String())
		return ""
	case <-time.After(delay):
	}
	cmd.Process.Signal(syscall.SIGQUIT)
	// qemu writes the core, then dies of the signal; a hung one is not
	// waited for long.
	stuck := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	<-done
	stuck.Stop()
	found, _ := filepath.Glob(filepath.Join(work, "qemu_*.core"))
	if len(found) != 1 {
		t.Errorf("%s/%s-%d: no qemu core after SIGQUIT (%v)\n%.500s", arch, l.name, i, delay, out.String())
		return ""
	}
	if err := os.Rename(found[0], path); err != nil {
		t.Fatal(err)
	}
	return path
}

// wildData is a compressible input of 8 MiB in dir, for the
// compressors: lines of words from a small vocabulary, always the same.
func wildData(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "data.txt")
	if st, err := os.Stat(path); err == nil && st.Size() >= 8<<20 {
		return path
	}
	rng := rand.New(rand.NewSource(1))
	words := strings.Fields("unwind frame stack core thread signal return address register table entry module trust gdb debian arm thumb prologue epilogue")
	var b bytes.Buffer
	for b.Len() < 8<<20 {
		for j := 3 + rng.Intn(9); j > 0; j-- {
			b.WriteString(words[rng.Intn(len(words))])
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d\n", rng.Intn(1e6))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
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
		if len(fig.Cases) > before {
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
