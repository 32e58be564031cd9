package handler

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// What the package's tests do again and again: configure a kernel-mode
// run, read back the reports it queued, unwind a core offline, and build
// and run the small C programs that crash or park on this host.

// kernelConfig is what a kernel-mode run's config holds beyond its queue
// and rate-limit state: more lines for the [handler], [queue] and
// [rate_limit] tables.
type kernelConfig struct{ handler, queue, rateLimit string }

// write writes the config in dir (u.toml), with the queue in dir/q
// (volatile storage allowed) and the rate limiter's state in dir/run.
func (k kernelConfig) write(t testing.TB, dir string) (cfg, qdir string) {
	t.Helper()
	cfg, qdir = filepath.Join(dir, "u.toml"), filepath.Join(dir, "q")
	os.Mkdir(qdir, 0o700)
	text := fmt.Sprintf("[handler]\n%s\n[queue]\ndir = %q\nallow_volatile = true\n%s\n[rate_limit]\n%s\nstate_dir = %q\n",
		k.handler, qdir, k.queue, k.rateLimit, filepath.Join(dir, "run"))
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, qdir
}

// kernelArgs are the handler's arguments as core_pattern's specifiers
// give them for a crash of pid (SIGSEGV, now, dump mode 1) running exe.
func kernelArgs(pid int, exe, comm string) []string {
	p := strconv.Itoa(pid)
	return []string{p, p, "11", strconv.FormatInt(time.Now().Unix(), 10), "1", "0", strings.ReplaceAll(exe, "/", "!"), comm}
}

// openQueue opens the queue at qdir as the uploader reads it.
func openQueue(t testing.TB, qdir string) *queue.Queue {
	t.Helper()
	q, err := queue.Open(qdir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// readReport reads the stored report name with read (a queue's Read,
// os.ReadFile for a report kept as a file) and decodes it.
func readReport(t testing.TB, read func(string) ([]byte, error), name string) *report.Report {
	t.Helper()
	z, err := read(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decode.Report(z)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// queuedReports are the reports in the queue at qdir, in its order.
func queuedReports(t testing.TB, qdir string) []*report.Report {
	t.Helper()
	q := openQueue(t, qdir)
	es, _ := q.List()
	var rs []*report.Report
	for _, e := range es {
		rs = append(rs, readReport(t, q.Read, e.Name))
	}
	return rs
}

// oneReport is the one report in the queue at qdir; log is what the run
// said, shown when there is none or more than one.
func oneReport(t testing.TB, qdir, log string) *report.Report {
	t.Helper()
	rs := queuedReports(t, qdir)
	if len(rs) != 1 {
		t.Fatalf("%d reports queued, want 1; log:\n%s", len(rs), log)
	}
	return rs[0]
}

// pollReports hands each report that lands in q to take, once, until take
// says it has what it waits for (true) or within has passed (false).
// Other processes on the host may crash meanwhile: their reports land in
// the same queue.
func pollReports(t testing.TB, q *queue.Queue, within, every time.Duration, take func(*report.Report) bool) bool {
	t.Helper()
	seen := map[string]bool{}
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(every) {
		es, _ := q.List()
		for _, e := range es {
			if seen[e.Name] {
				continue
			}
			seen[e.Name] = true
			if take(readReport(t, q.Read, e.Name)) {
				return true
			}
		}
	}
	return false
}

// offlineReport unwinds o's core as the offline handler does, with the
// default config and no log unless o names them.
func offlineReport(t testing.TB, o OfflineOptions) *report.Report {
	t.Helper()
	if o.Config == nil {
		o.Config = config.Default()
	}
	if o.Log == nil {
		o.Log = NewLogger(io.Discard)
	}
	r, err := Offline(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// buildC compiles src with gcc and flags (and -pthread) into dir/name.
func buildC(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	prog := filepath.Join(dir, name)
	if err := os.WriteFile(prog+".c", []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(append(flags, "-pthread", "-o", prog), prog+".c")
	testutil.Run(t, "gcc", args...)
	return prog
}

// startReady starts cmd and waits for the line "ready" on its standard
// output: the program has set up what it parks or crashes with. A
// program that says anything else is killed.
func startReady(cmd *exec.Cmd) error {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("%q said %q (%v), not ready", cmd.Args, line, err)
	}
	return nil
}

// crashProg runs prog (with its arguments, a shell word list) with core
// dumps allowed, as a crashing program runs under core_pattern, and
// returns its pid, how long until it was reaped and how it ended.
func crashProg(t testing.TB, prog string) (int, time.Duration, *os.ProcessState) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "ulimit -c unlimited; exec "+prog)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // it crashes
	return cmd.Process.Pid, time.Since(start), cmd.ProcessState
}

// statusOf is a kB field of /proc/<pid>/status (VmRSS, VmHWM), 0 when
// it cannot be read.
func statusOf(pid int, field string) int64 {
	return statusKiB(procStatus(fmt.Sprintf("/proc/%d/status", pid)), field)
}
