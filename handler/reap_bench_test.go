package handler

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/sysctl"
)

const bigSrc = `
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void *park(void *a) { for (;;) pause(); return a; }
char *volatile keep; /* escapes: the compiler must not drop the memset */
int main(void) {
	size_t n = (size_t)1 << 30;
	char *p = malloc(n);
	keep = p;
	memset(p, 1, n); /* 1 GiB touched: all of it goes into a core */
	pthread_t t;
	for (int i = 0; i < 31; i++) pthread_create(&t, 0, park, 0);
	printf("ready\n");
	fflush(stdout);
	for (;;) pause();
}
`

// bigHost is what both crash-to-reap benchmarks start from: in a short
// temporary dir, the big crasher built, the handler with its config as it
// ships (no save_core_dir), core_pattern swapped ("core" until a mode sets
// its own, restored at the end) and the queue the reports land in.
func bigHost(b *testing.B) (dir, bin, hbin, cfg string, q *queue.Queue) {
	dir, _ = os.MkdirTemp("", "uw")
	b.Cleanup(func() { os.RemoveAll(dir) })
	src := filepath.Join(dir, "big.c")
	bin = filepath.Join(dir, "big")
	os.WriteFile(src, []byte(bigSrc), 0o644)
	if out, err := exec.Command("gcc", "-O0", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	hbin, cfg, qdir, _ := hostHandler(b, dir)
	text, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(text), "save_core_dir", "#save_core_dir", 1)), 0o644)
	installCorePattern(b, "core")
	q, _ = queue.Open(qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	return
}

// BenchmarkCrashToReap measures how long a crashed process with 1 GiB of
// touched memory and 32 threads takes from its fatal signal to being
// reaped by its parent, with unwound-handler as core_pattern (live and
// stream memory), against a helper that exits at once (|/bin/true) and the
// kernel writing the core to a file, all in the same run. It reports the
// ratios, the time the handler held the process (frozen_ms) and its peak
// RSS. Opt-in like TestHost: it replaces core_pattern and restores it.
//
//	UNWOUND_TEST_HOST=1 go test -run '^$' -bench CrashToReap -benchtime 3x ./handler
func BenchmarkCrashToReap(b *testing.B) {
	if os.Getenv("UNWOUND_TEST_HOST") != "1" || os.Geteuid() != 0 {
		b.Skip("opt-in: UNWOUND_TEST_HOST=1 as root (replaces core_pattern, restores it)")
	}
	dir, bin, hbin, cfg, q := bigHost(b)
	text, _ := os.ReadFile(cfg)
	streamCfg := filepath.Join(dir, "stream.toml")
	os.WriteFile(streamCfg, []byte(strings.Replace(string(text), "[handler]\n", "[handler]\nlive = false\n", 1)), 0o644)
	cores := filepath.Join(dir, "cores")

	modes := []struct{ name, pattern string }{
		{"true", "|/bin/true"},
		{"unwound-live", "|" + hbin + " --config " + cfg + " " + sysctl.PatternSpecifiers},
		{"unwound-stream", "|" + hbin + " --config " + streamCfg + " " + sysctl.PatternSpecifiers},
		{"kernel-file", cores + "/core.%p"},
	}
	total := map[string]time.Duration{}
	frozen := map[string]int64{}
	rss := map[string]int64{}
	for i := 0; i < b.N; i++ {
		for _, m := range modes {
			os.WriteFile(corePatternFile, []byte(m.pattern), 0o644)
			d, pid := crashBig(b, bin)
			total[m.name] += d
			if strings.HasPrefix(m.name, "unwound") {
				r := waitReport(b, q, pid)
				frozen[m.name] += r.Handler.FrozenMS
				if r.Handler.MaxRSSKiB > rss[m.name] {
					rss[m.name] = r.Handler.MaxRSSKiB
				}
				if len(r.Threads) != 32 || r.Threads[0].StopReason == "" {
					b.Errorf("%s: %d threads", m.name, len(r.Threads))
				}
			}
			os.RemoveAll(cores)
			os.Mkdir(cores, 0o700)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	base := ms(total["true"])
	for _, m := range modes {
		b.ReportMetric(ms(total[m.name]), m.name+"-ms")
		b.ReportMetric(ms(total[m.name])/base, m.name+"/true")
	}
	b.ReportMetric(float64(frozen["unwound-live"])/float64(b.N), "live-frozen-ms")
	b.ReportMetric(float64(frozen["unwound-stream"])/float64(b.N), "stream-frozen-ms")
	b.ReportMetric(float64(rss["unwound-live"]), "live-maxrss-KiB")
	b.ReportMetric(float64(rss["unwound-stream"]), "stream-maxrss-KiB")
}

// crashBig starts the 1 GiB program, waits until it is ready, sends it
// SIGSEGV and returns the time until it is reaped.
func crashBig(b *testing.B, bin string) (time.Duration, int) {
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+bin)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		b.Fatalf("child said %q", line)
	}
	t0 := time.Now()
	if rss := vmRSS(cmd.Process.Pid); rss < 1<<20 {
		b.Fatalf("child RSS %d KiB: the 1 GiB is not there", rss)
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGSEGV)
	cmd.Wait()
	d := time.Since(t0)
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		b.Fatalf("child was not killed by its signal: %v", cmd.ProcessState)
	}
	return d, cmd.Process.Pid
}

func vmRSS(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		var kb int
		if n, _ := fmt.Sscanf(l, "VmRSS: %d kB", &kb); n == 1 {
			return kb
		}
	}
	return 0
}
