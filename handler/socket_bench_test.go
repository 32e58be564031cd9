package handler

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/handler/coredumpsock"
	"github.com/unwound-dev/unwound/sysctl"
)

// BenchmarkSocketCrashToReap is BenchmarkCrashToReap's 1 GiB, 32-thread
// crash through the coredump socket server (@@, or @ on 6.16), against
// |/bin/true and pipe live mode, in one run: the server with the
// supervised child (what ships) and without (handler.supervise = false,
// the unwinding in the server's process). It also reports the server's
// idle and peak RSS, and the time from a crash to its report when the
// crash itself starts the server (socket activation, as systemd does it:
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
	idle := vmRSS(srv.Process.Pid)

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
			if err := os.WriteFile(corePatternFile, []byte(m.pattern), 0o644); err != nil {
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
	peak := vmHWM(srv.Process.Pid)
	inPeak := vmHWM(inSrv.Process.Pid)

	// Socket activation: nothing runs until the first connection.
	os.WriteFile(corePatternFile, []byte("core"), 0o644)
	actSock := filepath.Join(dir, "a.sock")
	ln, err := coredumpsock.Listen(actSock, coredumpsock.DefaultBacklog)
	if err != nil {
		b.Fatal(err)
	}
	os.WriteFile(corePatternFile, []byte(form+actSock), 0o644)
	// The crash comes first and waits in the backlog (the kernel holds the
	// task); the server is then started as systemd starts it when the
	// socket becomes readable. Measured from that start: other crashes on
	// the host reach the socket too, so its readability says nothing.
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+bin)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		b.Fatalf("child said %q", line)
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
	b.ReportMetric(float64(peak), "server-peak-rss-KiB")
	b.ReportMetric(float64(inPeak), "inproc-server-peak-rss-KiB")
	b.ReportMetric(float64(firstReport.Microseconds())/1000, "activation-first-report-ms")
	b.ReportMetric(float64(reap.Microseconds())/1000, "activation-reap-ms")
}

// startServer runs unwound-handler --serve-coredump-socket; with ln, as
// systemd's socket activation does: the socket as fd 3, LISTEN_FDS=1 and
// LISTEN_PID the server's own pid (sh's $$, kept by exec).
func startServer(b *testing.B, hbin, cfg, sock string, ln *os.File) *exec.Cmd {
	cmd := exec.Command(hbin, "--config", cfg, "--serve-coredump-socket", sock)
	if ln != nil {
		cmd = exec.Command("sh", "-c", `LISTEN_FDS=1 LISTEN_PID=$$ exec "$0" "$@"`, hbin, "--config", cfg, "--serve-coredump-socket", sock)
		cmd.ExtraFiles = []*os.File{ln}
	}
	cmd.Env = append(os.Environ(), "UNWOUND_LOG_STDERR=1")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	if ln != nil {
		return cmd
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode().Type() == os.ModeSocket {
			return cmd
		}
	}
	b.Fatalf("no socket at %s", sock)
	return nil
}

// vmHWM is a process's peak resident set, KiB.
func vmHWM(pid int) int {
	bs, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(bs), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
