package handler

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/handler/coredumpsock"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/testutil"
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
	dir = testutil.HostDir(b, "replaces core_pattern")
	bin = buildC(b, dir, "big", bigSrc, "-O0")
	hbin, cfg, qdir, _ := hostHandler(b, dir, false)
	installCorePattern(b, "core")
	q = openQueue(b, qdir)
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
			os.WriteFile(testutil.CorePatternFile, []byte(m.pattern), 0o644)
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
	if err := startReady(cmd); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if rss := statusOf(cmd.Process.Pid, "VmRSS"); rss < 1<<20 {
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

// BenchmarkSocketCrashToReap is BenchmarkCrashToReap's 1 GiB, 32-thread
// crash through the coredump socket server (@@, or @ on 6.16), against
// |/bin/true and pipe live mode, in one run: the server with the
// supervised child (what ships: a worker started ahead) and without
// (handler.supervise = false, the unwinding in the server's process). It
// also reports the server's idle and peak RSS, its idle worker's RSS, and
// the time from a crash to its report when the crash itself starts the
// server (socket activation, as systemd does it:
// the socket listens, the first connection starts the service with the
// socket as fd 3). Opt-in, root, a kernel with the socket:
//
//	UNWOUND_TEST_HOST=1 go test -run '^$' -bench SocketCrashToReap -benchtime 3x ./handler
func BenchmarkSocketCrashToReap(b *testing.B) {
	if os.Getenv("UNWOUND_TEST_HOST") != "1" || os.Geteuid() != 0 {
		b.Skip("opt-in: UNWOUND_TEST_HOST=1 as root (replaces core_pattern, restores it)")
	}
	if plain, _ := sysctl.SocketSupported(sysctl.KernelRelease()); !plain {
		b.Skipf("kernel %s has no coredump socket", sysctl.KernelRelease())
	}
	dir, bin, hbin, cfg, q := bigHost(b)
	shipped, _ := os.ReadFile(cfg)
	inCfg := filepath.Join(dir, "inproc.toml")
	os.WriteFile(inCfg, []byte(strings.Replace(string(shipped), "[handler]\n", "[handler]\nsupervise = false\n", 1)), 0o644)

	form := "@@"
	if _, request := sysctl.SocketSupported(sysctl.KernelRelease()); !request {
		form = "@"
	}
	sock := filepath.Join(dir, "s.sock")
	inSock := filepath.Join(dir, "i.sock")
	srv := startServer(b, hbin, cfg, sock, nil)
	inSrv := startServer(b, hbin, inCfg, inSock, nil)
	time.Sleep(300 * time.Millisecond)
	idle := statusOf(srv.Process.Pid, "VmRSS")
	worker := statusOf(workerOf(srv.Process.Pid, 0), "VmRSS")

	modes := []struct{ name, pattern string }{
		{"true", "|/bin/true"},
		{"pipe-live", "|" + hbin + " --config " + cfg + " " + sysctl.PatternSpecifiers},
		{"socket", form + sock},
		{"socket-inproc", form + inSock},
	}
	total := map[string]time.Duration{}
	frozen := map[string]int64{}
	for i := 0; i < b.N; i++ {
		for _, m := range modes {
			if err := os.WriteFile(testutil.CorePatternFile, []byte(m.pattern), 0o644); err != nil {
				b.Fatal(err)
			}
			d, pid := crashBig(b, bin)
			total[m.name] += d
			if m.name != "true" {
				r := waitReport(b, q, pid)
				frozen[m.name] += r.Handler.FrozenMS
				if r.Handler.Mode != "live" || len(r.Threads) != 32 {
					b.Errorf("%s: mode %s, %d threads", m.name, r.Handler.Mode, len(r.Threads))
				}
			}
		}
	}
	peak := statusOf(srv.Process.Pid, "VmHWM")
	inPeak := statusOf(inSrv.Process.Pid, "VmHWM")

	// Socket activation: nothing runs until the first connection.
	os.WriteFile(testutil.CorePatternFile, []byte("core"), 0o644)
	actSock := filepath.Join(dir, "a.sock")
	ln, err := coredumpsock.Listen(actSock, coredumpsock.DefaultBacklog)
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(testutil.CorePatternFile, []byte(form+actSock), 0o644)
	// The crash comes first and waits in the backlog (the kernel holds the
	// task); the server is then started as systemd starts it when the
	// socket becomes readable. Measured from that start: other crashes on
	// the host reach the socket too, so its readability says nothing.
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+bin)
	if err := startReady(cmd); err != nil {
		b.Fatal(err)
	}
	syscall.Kill(cmd.Process.Pid, syscall.SIGSEGV)
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	startServer(b, hbin, cfg, actSock, ln)
	cmd.Wait()
	reap := time.Since(t0)
	waitReport(b, q, cmd.Process.Pid)
	firstReport := time.Since(t0)

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	for _, m := range modes {
		b.ReportMetric(ms(total[m.name]), m.name+"-ms")
		if m.name != "true" {
			b.ReportMetric(float64(frozen[m.name])/float64(b.N), m.name+"-frozen-ms")
		}
	}
	b.ReportMetric(ms(total["socket"])/ms(total["pipe-live"]), "socket/pipe-live")
	b.ReportMetric(ms(total["socket-inproc"])/ms(total["pipe-live"]), "socket-inproc/pipe-live")
	b.ReportMetric(ms(total["socket"])/ms(total["true"]), "socket/true")
	b.ReportMetric(float64(idle), "server-idle-rss-KiB")
	b.ReportMetric(float64(worker), "worker-idle-rss-KiB")
	b.ReportMetric(float64(peak), "server-peak-rss-KiB")
	b.ReportMetric(float64(inPeak), "inproc-server-peak-rss-KiB")
	b.ReportMetric(float64(firstReport.Microseconds())/1000, "activation-first-report-ms")
	b.ReportMetric(float64(reap.Microseconds())/1000, "activation-reap-ms")
}

// startServer runs unwound-handler --serve-coredump-socket (serverCmd)
// until the benchmark ends and, unless socket-activated (ln), waits for
// its socket.
func startServer(b *testing.B, hbin, cfg, sock string, ln *os.File) *exec.Cmd {
	cmd := serverCmd(hbin, cfg, sock, ln)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	if ln == nil && !listening(sock) {
		b.Fatalf("no socket at %s", sock)
	}
	return cmd
}
