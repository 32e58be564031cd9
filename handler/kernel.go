package handler

import (
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/sysctl"
	"golang.org/x/sys/unix"
)

// KernelOptions are the handler's inputs in kernel mode.
type KernelOptions struct {
	ConfigPath string
	Args       []string // the expanded PatternSpecifiers
	Stdin      *os.File // the core pipe; a regular file is read as a core file (pipeInput)
	Log        *Logger
	// ProcSys is where the kernel's crash settings are checked for drift
	// (default /proc/sys).
	ProcSys string
	// Pidfd is the --pidfd argument: the number %F expanded to (the fd
	// the kernel installed the crashed process's pidfd as), "" without.
	Pidfd string
	// Self is the handler's own binary: when set and handler.supervise is
	// on, the unwinding runs in a child of it (supervise.go).
	Self string

	// inProcess: one crash of many in a long-running process (the coredump
	// socket server, serve.go), which must neither exit at the hard
	// deadline (its server bounds each connection) nor make itself the
	// OOM killer's first choice.
	inProcess bool
	// workers: the coredump socket server's pre-started worker, which a
	// supervised crash takes before it starts a child (worker.go).
	workers *workers
}

// RunKernel handles one crash piped by the kernel. It always returns 0: a
// non-zero exit only makes the kernel log noise, and there is nobody to
// act on it. Everything that goes wrong is logged and, when a report can
// still be written, recorded in it.
func RunKernel(o KernelOptions) int {
	start := time.Now()
	e, ka, notes, stop := startKernel(o.Log, o.ConfigPath, o.Args, start, false)
	defer stop()
	if o.inProcess {
		// One crash of many in the coredump socket server (serve.go):
		// its server bounds each connection, so no hard exit here.
		stop()
		e.hard = nil
	}
	e.drift = func() { LogDrift(e.log, o.ProcSys, o.ConfigPath, e.cfg.RateLimit.MaxConcurrent) }
	e.inject = injectFromEnv(false)
	if o.inProcess && !serverDrift.due(start) {
		// The coredump socket server checks once a minute, not once a
		// crash: a storm of 64 logged the same lines 64 times.
		e.drift = nil
	}
	pfd := kernelPidfd(e.log, o.Pidfd, ka.PID)
	in := pipeInput(o.Stdin, nil, ka, len(o.Args), pfd, start.Add(e.cfg.Handler.Deadline.D()))
	// Under a crash storm, a handler the OOM killer takes first is
	// better than a service. (The process's own setting: a server
	// handling crashes in process would not take it.)
	if !o.inProcess {
		_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	}
	c := newCrash(e, in, start)
	c.out.errs = notes
	work := (*crash).unwindHere
	if o.Self != "" && e.cfg.Handler.Supervise {
		work = func(c *crash) *report.Report { return c.supervise(o) }
	}
	c.pipeline(work)
	return 0
}

// serverDrift spaces the drift checks of a long-running server.
var serverDrift driftClock

// driftClock says when a drift check is due: at most once a minute.
type driftClock struct {
	mu   sync.Mutex
	last time.Time
}

func (d *driftClock) due(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.last.IsZero() && now.Sub(d.last) < time.Minute {
		return false
	}
	d.last = now
	return true
}

// noDriftEnv, set in a supervised child's environment, says its server
// checked for drift lately: the child does not.
const noDriftEnv = "UNWOUND_NO_DRIFT"

// LogDrift logs, one warning each, how the kernel's crash settings differ
// from what this handler needs (Drift with this executable).
func LogDrift(lg *Logger, procSys, configPath string, maxConcurrent int) {
	self, _ := sysctl.Executable()
	for _, d := range sysctl.Check(procSys, self, configPath, maxConcurrent) {
		lg.Warnf("drift: %s", d)
	}
}

func admitPolicy(cfg *config.Config) admit.Policy {
	return admit.Policy{Dir: cfg.RateLimit.StateDir, Count: cfg.RateLimit.Count, Window: cfg.RateLimit.Window.D(),
		PerExecutable: cfg.RateLimit.PerExecutable, MaxConcurrent: cfg.RateLimit.MaxConcurrent}
}

// startKernel is how RunKernel and RunChild begin: never dump ourselves
// (RLIMIT_CORE is 1 already, but a core of the handler would recurse into
// core_pattern on some kernels), load the config, bound memory and time,
// parse the kernel's arguments. A child leaves the logging of a bad config
// or argument to its parent. stop disarms the hard deadline.
func startKernel(lg *Logger, configPath string, args []string, start time.Time, child bool) (e *env, ka admit.KernelArgs, notes []string, stop func() bool) {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	cfg, cfgErr := config.LoadOrDefault(configPath)
	if cfgErr != nil && !child {
		lg.Errorf("%v", cfgErr)
	}
	limitMemory(cfg.Handler.MemoryLimitMiB, child)
	deadline := start.Add(cfg.Handler.Deadline.D())
	// The last line of defence: whatever hangs, the handler goes away a
	// little after its deadline, which ends the dump and frees the
	// process. A child exits non-zero: its parent then reports.
	code := 0
	if child {
		code = 3
	}
	hard := &hardDeadline{}
	hard.timer = time.AfterFunc(time.Until(deadline)+2*time.Second, func() {
		hard.settle(lg)
		os.Exit(code)
	})
	ka, argErr := admit.ParseKernelArgs(args)
	if argErr != nil && !child {
		lg.Warnf("%v", argErr)
	}
	for _, err := range []error{cfgErr, argErr} {
		if err != nil {
			notes = append(notes, err.Error())
		}
	}
	e = &env{cfg: cfg, log: lg, policy: admitPolicy(cfg)}
	if !child {
		e.hard = hard // a child's parent counts what the child leaves
	}
	return e, ka, notes, hard.timer.Stop
}

// hardDeadline is startKernel's last line of defence. A handler that goes
// at it without a report would lose the crash, and with it the drops its
// report was to carry (under a storm, tens of them): so it settles the
// crash's admission ticket first, as lost for "deadline", never waiting
// more than a second for a report being stored or the admission state's
// lock. (When it cannot, the next admission finds the crash held with its
// slot free and counts it as handler_killed, unless its report landed:
// admit.Ticket.Landed.)
type hardDeadline struct {
	timer  *time.Timer
	ticket atomic.Pointer[admit.Ticket] // the crash being handled, nil before admission
}

// hold sets the admitted crash the deadline settles.
func (h *hardDeadline) hold(t *admit.Ticket) {
	if h != nil {
		h.ticket.Store(t)
	}
}

func (h *hardDeadline) settle(lg *Logger) {
	t := h.ticket.Load()
	if t.Stored() {
		// Stalled in the fsyncs after the rename, or in the state's
		// lock: the report is in, and the next admission settles it.
		lg.Errorf("hard deadline passed, exiting: the report is in the queue")
		return
	}
	lg.Errorf("hard deadline passed, exiting without a report")
	// A report being stored right now is waited for (a write, an fsync
	// and a rename of a few KiB), so that it is not also counted lost.
	if t.Settle("deadline", time.Second) {
		lg.Errorf("the crash is counted as dropped (deadline) in the next report")
	}
}

// limitMemory bounds the handler: the Go memory limit (soft: the
// collector works harder) and, with hard (the supervised child), a cap on
// its data segment at four times that above what the runtime holds at
// start, so a runaway allocation ends in the runtime's "out of memory"
// (which the parent reports) rather than in the board's OOM killer
// choosing a victim.
func limitMemory(mib int, hard bool) {
	debug.SetMemoryLimit(int64(mib) << 20)
	// The heap is a few MiB: collecting at 25% growth instead of 100%
	// costs little time and keeps the peak resident set near the live
	// heap (issue 10's budget for the parent and child together:
	// docs/design.md, "Self-supervision").
	debug.SetGCPercent(25)
	// Unbounded recursion dies at 4 MiB of stack instead of 1 GiB, well
	// below the memory limit (near it the collector would thrash until
	// the deadline): the parsers do not recurse, real stacks are KiBs.
	debug.SetMaxStack(4 << 20)
	if !hard {
		return
	}
	if data := vmData(); data > 0 {
		lim := uint64(data) + uint64(4*mib)<<20
		_ = unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: lim, Max: lim})
	}
}
