package handler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/syncbuf"
)

// childRun is one run of the handler binary as the kernel would start it.
type childRun struct {
	reports []*report.Report
	rc      int
	elapsed time.Duration
	log     string
}

// A pid that is not the crashed process: /proc gives nothing, so memory
// comes from the core stream.
var noProcArgs = kernelArgs(999999999, "/usr/bin/victim", "victim")

// runHandler runs bin in kernel mode on core (fed through a pipe; with
// hold, the pipe is kept open after the core, as a stalled kernel would)
// and returns what landed in the queue.
func runHandler(t *testing.T, bin string, core []byte, hold bool, cfgExtra string, env ...string) childRun {
	t.Helper()
	return newHandlerEnv(t, cfgExtra).run(t, bin, core, noProcArgs, hold, env...)
}

// handlerEnv is a config, a queue and a state directory for kernel-mode
// runs of the handler binary.
type handlerEnv struct{ cfg, qdir string }

func newHandlerEnv(t *testing.T, cfgExtra string) *handlerEnv {
	t.Helper()
	h := &handlerEnv{}
	h.cfg, h.qdir = kernelConfig{handler: "deadline = \"2s\"\n" + cfgExtra}.write(t, t.TempDir())
	return h
}

// run returns the run and every report in the queue so far.
func (h *handlerEnv) run(t *testing.T, bin string, core []byte, args []string, hold bool, env ...string) childRun {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--config", h.cfg}, args...)...)
	cmd.Env = append(env, "UNWOUND_LOG_STDERR=1")
	run := feedRun(t, cmd, true, core, hold)
	run.reports = queuedReports(t, h.qdir)
	return run
}

// feedRun runs cmd with core on its stdin (when piped) or none, and says
// how it ended. The core goes through a pipe, closed after it unless hold
// (as a stalled kernel keeps it open); the parent keeps no read end, so a
// write fails with EPIPE once the child lets go, as the kernel's would.
func feedRun(t *testing.T, cmd *exec.Cmd, piped bool, core []byte, hold bool) childRun {
	t.Helper()
	var pr, pw *os.File
	if piped {
		var err error
		if pr, pw, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		cmd.Stdin = pr
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if piped {
		pr.Close()
		go func() {
			pw.Write(core) // fails with EPIPE once the handler lets go
			if !hold {
				pw.Close()
			}
		}()
	}
	err := cmd.Wait()
	if piped {
		pw.Close()
	}
	run := childRun{elapsed: time.Since(start), log: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		run.rc = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return run
}

// When the unwinding child dies of what Go cannot recover from, or hangs,
// the supervising parent still queues a report: the signal, the
// executable, each thread's PC and link register, and why.
func TestSupervisedChildDies(t *testing.T) {
	bin := handlerBinary(t, "unwoundfault")
	core := stackCore()
	for _, tc := range []struct{ fault, why string }{
		{"panic", "panic: unwoundfault"},
		// Out of memory under the child's data cap. Go 1.25's GC now and
		// then faults on a nil span instead (1 run in 7-11 here, Go
		// 1.26.3): the runtime's signal line is then the reason given.
		{"oom", "out of memory|SIGSEGV: segmentation violation"},
		{"stack", "fatal error: stack overflow"},
		{"maps", "fatal error: concurrent map"},
		{"hang", "overran the deadline"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			if tc.fault == "hang" && testing.Short() {
				t.Skip("waits out the deadline: not in -short")
			}
			run := runHandler(t, bin, core.bytes(), false, "", "UNWOUND_FAULT="+tc.fault)
			if run.rc != 0 || len(run.reports) != 1 {
				t.Fatalf("exit %d, %d reports; stderr:\n%s", run.rc, len(run.reports), run.log)
			}
			r := run.reports[0]
			// On the handler's own clock (hostile_test.go): the child's
			// deadline and grace, then the registers-only report.
			if time.Duration(r.Handler.DurationMS)*time.Millisecond > 2*time.Second+childGrace+1500*time.Millisecond || run.elapsed > 15*time.Second {
				t.Errorf("took %d ms by its own clock (%v in all), deadline 2s", r.Handler.DurationMS, run.elapsed)
			}
			errs := strings.Join(r.Errors, "; ")
			if !r.Partial || r.Handler.Mode != "registers" || !slices.ContainsFunc(strings.Split(tc.why, "|"), func(w string) bool { return strings.Contains(errs, w) }) {
				t.Errorf("partial %v mode %q errors %q, want one with %q", r.Partial, r.Handler.Mode, errs, tc.why)
			}
			checkRegistersReport(t, r, core)
			t.Logf("%v: %s", run.elapsed.Round(time.Millisecond), errs)
		})
	}
}

// TestHardDeadlineCounts: a handler that reaches its hard deadline still
// hanging (here in storing the report, as on a flash that stalls every
// write) goes without a report, but not without a trace: the crash is
// counted under "deadline", the drops its report was to carry go back,
// and the next report carries both. Supervised (the child hangs too, is
// killed, and the parent hangs writing the registers-only report) and
// not. A handler killed outright (SIGKILL, as the OOM killer does) can
// count nothing: the next admission finds its crash held with its slot
// free and counts it as handler_killed.
func TestHardDeadlineCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the hard deadline: not in -short")
	}
	bin := handlerBinary(t, "unwoundfault")
	core := stackCore()
	for _, tc := range []struct {
		name, sup, want string
		kill            bool
	}{
		{"supervised", "true", "deadline", false},
		{"unsupervised", "false", "deadline", false},
		{"killed", "true", admit.ReasonKilled, true},
	} {
		h := newHandlerEnv(t, "supervise = "+tc.sup)
		h.droppedBefore(t, 5) // which this crash's report is to carry
		if tc.kill {
			killWhileStoring(t, bin, h, core.bytes())
		} else {
			run := h.run(t, bin, core.bytes(), noProcArgs, false, "UNWOUND_FAULT=storehang")
			if len(run.reports) != 0 {
				t.Fatalf("%s: %d reports from a handler that hangs storing", tc.name, len(run.reports))
			}
			if !strings.Contains(run.log, "hard deadline passed") || !strings.Contains(run.log, "counted as dropped (deadline)") {
				t.Errorf("%s: log:\n%s", tc.name, run.log)
			}
			t.Logf("%s: gone after %v", tc.name, run.elapsed.Round(time.Millisecond))
		}
		next := h.run(t, handlerBinary(t, ""), core.bytes(), noProcArgs, false)
		if len(next.reports) != 1 {
			t.Fatalf("%s: %d reports after the next crash; log:\n%s", tc.name, len(next.reports), next.log)
		}
		if got := next.reports[0].Dropped; got[tc.want] != 1 || got["concurrency"] != 5 || len(got) != 2 {
			t.Errorf("%s: the next report carries %v, want concurrency 5 and %s 1", tc.name, got, tc.want)
		}
	}
}

// TestLandedIsStored: a handler killed or stalled right after its
// report's rename (a stalling flash in the fsyncs that follow, the OOM
// killer) leaves one report and no loss counted: a supervising parent
// writes no registers-only copy of it, and the next report does not say
// the crash was dropped. CI's TestCrashStorm once counted such a crash
// both stored and handler_killed.
func TestLandedIsStored(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the deadline: not in -short")
	}
	bin := handlerBinary(t, "unwoundfault")
	core := stackCore()
	for _, tc := range []struct{ name, sup, fault, log string }{
		{"child-killed", "true", "landeddie", "after its report was stored"},
		{"child-stalls", "true", "landedhang", "after its report was stored"},
		{"stalls", "false", "landedhang", "the report is in the queue"},
	} {
		h := newHandlerEnv(t, "supervise = "+tc.sup)
		h.droppedBefore(t, 5)
		run := h.run(t, bin, core.bytes(), noProcArgs, false, "UNWOUND_FAULT="+tc.fault)
		if len(run.reports) != 1 || run.reports[0].Handler.Mode == "registers" || !strings.Contains(run.log, tc.log) {
			t.Fatalf("%s: %d reports (want the one full report); log:\n%s", tc.name, len(run.reports), run.log)
		}
		if got := run.reports[0].Dropped; got["concurrency"] != 5 || len(got) != 1 {
			t.Errorf("%s: the report carries %v, want concurrency 5", tc.name, got)
		}
		next := h.run(t, handlerBinary(t, ""), core.bytes(), noProcArgs, false)
		if len(next.reports) != 2 {
			t.Fatalf("%s: %d reports after the next crash; log:\n%s", tc.name, len(next.reports), next.log)
		}
		for _, r := range next.reports {
			if r.ID != run.reports[0].ID && len(r.Dropped) != 0 {
				t.Errorf("%s: the next report carries %v, want nothing", tc.name, r.Dropped)
			}
		}
		t.Logf("%s: %v", tc.name, run.elapsed.Round(time.Millisecond))
	}
}

// droppedBefore records n crashes dropped for concurrency before the
// next one, in the admission state the handler's config names.
func (h *handlerEnv) droppedBefore(t *testing.T, n int) {
	t.Helper()
	state := filepath.Join(filepath.Dir(h.qdir), "run")
	os.Mkdir(state, 0o700)
	if err := os.WriteFile(filepath.Join(state, "rate.state"), []byte(fmt.Sprintf("d concurrency %d\n", n)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// killWhileStoring starts bin on core with storing made to hang and kills
// it with SIGKILL once the report is being stored.
func killWhileStoring(t *testing.T, bin string, h *handlerEnv, core []byte) {
	cmd := exec.Command(bin, append([]string{"--config", h.cfg}, noProcArgs...)...)
	cmd.Env = []string{"UNWOUND_LOG_STDERR=1", "UNWOUND_FAULT=storehang"}
	cmd.Stdin = bytes.NewReader(core)
	var log syncbuf.Buffer
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "crashes not reported since"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the store never began:\n%s", log.String())
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
}

func checkRegistersReport(t *testing.T, r *report.Report, core *synthCore) {
	t.Helper()
	if r.Signal.Name != "SIGSEGV" || r.PID != 999999999 || r.Exe != "/usr/bin/victim" || r.Comm != "victim" {
		t.Errorf("signal %q pid %d exe %q comm %q", r.Signal.Name, r.PID, r.Exe, r.Comm)
	}
	if r.Signal.FaultAddr == nil || *r.Signal.FaultAddr != report.Hex(core.addr) {
		t.Errorf("fault address %v", r.Signal.FaultAddr)
	}
	if len(r.Threads) != len(core.threads) {
		t.Fatalf("%d threads, want %d", len(r.Threads), len(core.threads))
	}
	for i, th := range r.Threads {
		want := core.threads[i]
		if th.TID != want.tid || len(th.Frames) != 2 ||
			th.Frames[0].PC != report.Hex(want.pc) || th.Frames[0].Method != "context" ||
			th.Frames[1].PC != report.Hex(want.lr) || th.Frames[1].Method != "lr" {
			b, _ := json.Marshal(th)
			t.Errorf("thread %d: %s", i, b)
		}
		if th.Frames[0].Module < 0 || r.Modules[th.Frames[0].Module].Path != "/usr/bin/victim" {
			t.Errorf("thread %d: frame 0 not placed in the executable: %+v %+v", i, th.Frames[0], r.Modules)
		}
	}
}

// With supervision on and a healthy child, the child's full report is the
// one queued, and only it.
func TestSupervisedChildReports(t *testing.T) {
	for _, sup := range []string{"true", "false"} {
		h := newHandlerEnv(t, "supervise = "+sup)
		run := h.run(t, handlerBinary(t, ""), stackCore().bytes(), noProcArgs, false)
		// The handler writes the queue (entries and lock 0600) and its
		// volatile state directory (0700), nothing else.
		des, _ := os.ReadDir(h.qdir)
		for _, de := range des {
			if fi, err := de.Info(); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("supervise=%s: queue file %s mode %v", sup, de.Name(), fi.Mode())
			}
		}
		all, _ := os.ReadDir(filepath.Dir(h.qdir))
		for _, de := range all {
			fi, _ := de.Info()
			switch de.Name() {
			case "q", "u.toml":
			case "run":
				if fi.Mode().Perm() != 0o700 {
					t.Errorf("state dir mode %v", fi.Mode())
				}
			default:
				t.Errorf("supervise=%s: the handler wrote %s", sup, de.Name())
			}
		}
		if run.rc != 0 || len(run.reports) != 1 {
			t.Fatalf("supervise=%s: exit %d, %d reports; stderr:\n%s", sup, run.rc, len(run.reports), run.log)
		}
		r := run.reports[0]
		if r.Handler.Mode != "stream" || len(r.Threads) != 2 {
			t.Errorf("supervise=%s: mode %q, %d threads, errors %q", sup, r.Handler.Mode, len(r.Threads), r.Errors)
		}
		// Stored, so settled: nothing held for the next admission to
		// take for a killed handler.
		if got := admit.Pending(filepath.Join(filepath.Dir(h.qdir), "run")); len(got) != 0 {
			t.Errorf("supervise=%s: pending after a stored report: %v", sup, got)
		}
	}
}

// With the log on stderr, a supervised child's lines reach it: a report
// the child cannot store is said there, not lost in silence (issue 29).
func TestSupervisedChildLogPassesThrough(t *testing.T) {
	// The first [queue] dir counts: one that cannot be a directory.
	h := newHandlerEnv(t, "supervise = true\n[queue]\ndir = \"/dev/null/q\"")
	run := h.run(t, handlerBinary(t, ""), stackCore().bytes(), noProcArgs, false)
	if run.rc != 0 || len(run.reports) != 0 {
		t.Fatalf("exit %d, %d reports; stderr:\n%s", run.rc, len(run.reports), run.log)
	}
	if !strings.Contains(run.log, "for pid 999999999 lost") {
		t.Errorf("the child's \"report lost\" line is not on stderr:\n%s", run.log)
	}
}

// Dump mode 2 (a process that changed credentials) follows
// handler.dump_mode_policy: the usual report, the registers alone, or
// nothing but a count in the next report.
func TestDumpModePolicy(t *testing.T) {
	bin := handlerBinary(t, "")
	core := stackCore().bytes()
	suid := slices.Clone(noProcArgs)
	suid[4] = "2"
	for _, policy := range []string{"report", "registers", "drop"} {
		h := newHandlerEnv(t, "dump_mode_policy = \""+policy+"\"\ninclude_cmdline = true")
		run := h.run(t, bin, core, suid, false)
		switch policy {
		case "report":
			if len(run.reports) != 1 || run.reports[0].Handler.Mode != "stream" || run.reports[0].Cmdline != nil {
				t.Errorf("%s: %d reports %+v", policy, len(run.reports), run.reports)
			}
		case "registers":
			if len(run.reports) != 1 || run.reports[0].Handler.Mode != "registers" ||
				!strings.Contains(strings.Join(run.reports[0].Errors, ";"), "dump mode 2") {
				t.Fatalf("%s: %d reports %+v", policy, len(run.reports), run.reports)
			}
			checkRegistersReport(t, run.reports[0], stackCore())
		case "drop":
			if len(run.reports) != 0 {
				t.Fatalf("%s: %d reports", policy, len(run.reports))
			}
			run = h.run(t, bin, core, noProcArgs, false)
			if len(run.reports) != 1 || run.reports[0].Dropped["dump_mode"] != 1 {
				t.Errorf("%s: the next report says dropped %v", policy, run.reports[0].Dropped)
			}
		}
		if run.rc != 0 {
			t.Errorf("%s: exit %d", policy, run.rc)
		}
	}
}

func TestHandoverRoundTrip(t *testing.T) {
	for _, h := range []handover{{StartNS: 1700000000123456789, Slot: -1}, {StartNS: 5, Slot: 3, Dropped: map[string]int{"rate_limit": 3, "concurrency": 1}}} {
		got, err := parseHandover(string(h.format()))
		if err != nil || got.StartNS != h.StartNS || got.Slot != h.Slot || len(got.Dropped) != len(h.Dropped) {
			t.Errorf("%+v: got %+v, %v", h, got, err)
		}
		for k, v := range h.Dropped {
			if got.Dropped[k] != v {
				t.Errorf("%s: %d, want %d", k, got.Dropped[k], v)
			}
		}
	}
	for _, bad := range []string{"", "x\n", "1\n", "1 a\n", "1 -2\n", "1 0 a\n", "1 0 a=-1\n", "1 0 a=b\n"} {
		if _, err := parseHandover(bad); err == nil {
			t.Errorf("parseHandover(%q): no error", bad)
		}
	}
}

// handler.save_core_dir keeps the whole core, as it streamed in, beside
// the report, supervised or not.
func TestSupervisedSaveCoreDir(t *testing.T) {
	core := stackCore().bytes()
	for _, sup := range []string{"true", "false"} {
		save := t.TempDir()
		h := newHandlerEnv(t, "supervise = "+sup+"\nsave_core_dir = \""+save+"\"")
		run := h.run(t, handlerBinary(t, ""), core, noProcArgs, false)
		if run.rc != 0 || len(run.reports) != 1 || run.reports[0].Handler.Mode != "stream" {
			t.Fatalf("supervise=%s: exit %d, %d reports; stderr:\n%s", sup, run.rc, len(run.reports), run.log)
		}
		saved, _ := filepath.Glob(filepath.Join(save, "core.999999999.*"))
		if len(saved) != 1 {
			t.Fatalf("supervise=%s: saved %q", sup, saved)
		}
		if b, _ := os.ReadFile(saved[0]); !bytes.Equal(b, core) {
			t.Errorf("supervise=%s: saved %d bytes, the core has %d", sup, len(b), len(core))
		}
	}
}

// A child that logged more than the head keeps before dying still has
// the runtime's words found.
func TestHeadWriterKeepsTheLastWords(t *testing.T) {
	w := &headWriter{max: 64}
	for i := 0; i < 100; i++ {
		fmt.Fprintf(w, "log line %d\n", i)
	}
	fmt.Fprintf(w, "fatal error: runtime: out of memory\n\ngoroutine 1 [running]:\n")
	if got := fatalLine(w.last()); got != "fatal error: runtime: out of memory" {
		t.Errorf("fatalLine = %q", got)
	}
	if got := fatalLine([]byte("log\nSIGSEGV: segmentation violation\nPC=0x4310bd m=0\n")); got != "SIGSEGV: segmentation violation" {
		t.Errorf("fatalLine of a runtime fault = %q", got)
	}
	if got := fatalLine([]byte("SIGSEGVX: a log line\n")); got != "" {
		t.Errorf("fatalLine of log lines = %q, want none", got)
	}
	if len(w.b) != 64 || len(w.tail) > 64 {
		t.Errorf("kept %d and %d bytes, want at most 64 each", len(w.b), len(w.tail))
	}
}
