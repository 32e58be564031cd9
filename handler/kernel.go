package handler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/sysctl"
	"github.com/unwound-dev/unwound/report"
	"golang.org/x/sys/unix"
)

// KernelOptions are the handler's inputs in kernel mode.
type KernelOptions struct {
	ConfigPath string
	Args       []string // the expanded PatternSpecifiers
	Stdin      *os.File // the core pipe
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
}

// RunKernel handles one crash piped by the kernel. It always returns 0: a
// non-zero exit only makes the kernel log noise, and there is nobody to
// act on it. Everything that goes wrong is logged and, when a report can
// still be written, recorded in it.
func RunKernel(o KernelOptions) int {
	lg := o.Log
	c, ka, deadline, stop := startKernel(lg, o.ConfigPath, o.Args, time.Now(), false)
	defer stop()
	if o.inProcess {
		stop()
	}
	cfg, pol := c.cfg, c.policy
	c.pidfd = kernelPidfd(lg, o.Pidfd, ka.PID)
	if cfg.Handler.HonorRlimit && ka.RlimitCore == 0 && len(o.Args) > 5 {
		lg.Infof("pid %d (%s): RLIMIT_CORE is 0, not reporting (handler.honor_rlimit_core)", ka.PID, ka.Comm)
		o.Stdin.Close()
		return 0
	}
	// A process that changed credentials (setuid, a daemon dropping root)
	// is dumped with %d = 2 only under fs.suid_dumpable = 2; 0 is never
	// piped by current kernels. Their memory may hold another user's
	// secrets: handler.dump_mode_policy decides (configs/unwound.toml).
	privileged := len(o.Args) > 4 && ka.Dumpable != 1
	if privileged && cfg.Handler.DumpModePolicy == "drop" {
		lg.Infof("pid %d (%s): dump mode %d, not reporting (handler.dump_mode_policy)", ka.PID, ka.Comm, ka.Dumpable)
		o.Stdin.Close()
		if os.MkdirAll(pol.Dir, 0o700) == nil {
			admit.Drop(pol, "dump_mode")
		}
		return 0
	}
	// Admission, from argv alone, before any heavy work. Under a crash
	// storm, a handler the OOM killer takes first is better than a service.
	if !o.inProcess {
		_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	}
	exeKey := ka.Exe
	if exeKey == "" {
		exeKey = ka.Comm
	}
	ticket, admErr := admit.Check(pol, exeKey)
	var dropped *admit.ErrDropped
	if errors.As(admErr, &dropped) {
		// Closing stdin ends the dump at once and frees the process.
		o.Stdin.Close()
		lg.Warnf("pid %d (%s): %v", ka.PID, ka.Exe, admErr)
		return 0
	}
	if admErr != nil {
		lg.Warnf("%v", admErr)
	}
	defer ticket.Release()

	c.drift = func() { LogDrift(lg, o.ProcSys, o.ConfigPath, cfg.RateLimit.MaxConcurrent) }
	c.dropped = ticket.Dropped
	if privileged {
		c.noCmdline = true
		if cfg.Handler.DumpModePolicy == "registers" {
			// Notes only: no memory of the process, none of its files.
			c.registersOnly = true
			c.errs = append(c.errs, fmt.Sprintf("dump mode %d: registers only (handler.dump_mode_policy)", ka.Dumpable))
			return c.run(o.Stdin, nil, deadline)
		}
	}
	if o.Self != "" && cfg.Handler.Supervise {
		return c.supervise(o, deadline)
	}
	return c.run(o.Stdin, nil, deadline)
}

// run reads the core (prefix, when set, holds its first bytes, already
// read from the pipe by a supervising parent), unwinds and stores the
// report.
func (c *crash) run(stdin *os.File, prefix io.Reader, deadline time.Time) int {
	in, release, saved := c.openStdin(stdin, prefix, deadline)
	if saved != nil {
		// Debug mode: the whole core goes to the file first, so the
		// process is held until it is written.
		r := c.handle(in, func() {}, deadline)
		c.saveCore(in, saved)
		release()
		r.Handler.FrozenMS = c.frozen.Milliseconds()
		c.close()
		c.logDrift()
		return c.store(r)
	}
	r := c.handle(in, release, deadline)
	release()
	c.close()
	// Once the process is released: a few small reads, never on its time.
	c.logDrift()
	return c.store(r)
}

// logDrift logs drift of the kernel's crash settings, when RunKernel asked
// for it: after the crashed process is released, never on its time.
func (c *crash) logDrift() {
	if c.drift != nil {
		c.drift()
	}
}

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

// handle reads the core's headers, then the memory: live from
// /proc/<pid>/mem while the process is frozen, or from the stream.
func (c *crash) handle(in io.Reader, release func(), deadline time.Time) *report.Report {
	stream, err, archErr := c.readHeaders(in)
	if err != nil {
		c.errorf("reading the core: %v", err)
		c.partial = true
	}
	if c.core == nil {
		return c.minimalReport()
	}
	core := c.core
	if c.registersOnly {
		release()
		c.frozen = time.Since(c.start)
		c.registersResults()
		return c.report()
	}
	c.inject.at("unwind")
	if archErr != nil {
		c.errorf("%v", archErr)
		c.partial = true
		return c.minimalReport()
	}
	stream.Deadline = deadline
	if cr, ok := in.(*coreReader); ok {
		// What is not kept is spliced into /dev/null, never copied.
		stream.Skip = func(_ io.Reader, n int64) (int64, error) { return cr.skip(n) }
	}
	if c.tid == 0 && len(core.Threads) > 0 {
		c.tid = core.Threads[0].TID
	}

	module.SetIODeadline(deadline)
	otherMountNS := c.procOK() && namespaceDiffers(c.pid, "mnt")
	c.cont = c.container()
	if err := c.live(release, deadline); err != nil {
		c.log.Warnf("live memory unusable (%v), reading stacks from the core stream", err)
		c.mode = "stream"
		// While the process is held, its files are opened as it saw them
		// (map_files: a container's files, not the handler's at the same
		// paths); once it is released /proc/<pid> goes away.
		mods := module.Group(fileMaps(core))
		var pre []module.Source
		if !c.noProc {
			pre = []module.Source{c.preopen(mods)}
		}
		if !c.procOK() {
			pre = nil // files of another process
		}
		c.collect(stream)
		release() // the stacks are in hand: let the kernel finish
		c.mods = mods
		c.sources = append(pre, c.procSources()...)
		if !otherMountNS {
			// /proc/<pid> unusable (the process is gone): its files are
			// taken from the handler's own root, unless it was seen in
			// another mount namespace (a container), whose files at the
			// same paths are other files.
			c.sources = append(c.sources, module.SysrootSource("/", nil))
		}
		c.addVDSO(vdsoSize(core))
		c.unwindThreads(deadline, true)
	}
	return c.report()
}

// startKernel is how RunKernel and RunChild begin: never dump ourselves
// (RLIMIT_CORE is 1 already, but a core of the handler would recurse into
// core_pattern on some kernels), load the config, bound memory and time,
// parse the kernel's arguments. A child leaves the logging of a bad config
// or argument to its parent. stop disarms the hard deadline.
func startKernel(lg *Logger, configPath string, args []string, start time.Time, child bool) (c *crash, ka admit.KernelArgs, deadline time.Time, stop func() bool) {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	cfg, cfgErr := config.LoadOrDefault(configPath)
	if cfgErr != nil && !child {
		lg.Errorf("%v", cfgErr)
	}
	limitMemory(cfg.Handler.MemoryLimitMiB, child)
	deadline = start.Add(cfg.Handler.Deadline.D())
	// The last line of defence: whatever hangs, the handler goes away a
	// little after its deadline, which ends the dump and frees the
	// process. A child exits non-zero: its parent then reports.
	code := 0
	if child {
		code = 3
	}
	hard := time.AfterFunc(time.Until(deadline)+2*time.Second, func() {
		lg.Errorf("hard deadline passed, exiting without a report")
		os.Exit(code)
	})
	ka, argErr := admit.ParseKernelArgs(args)
	if argErr != nil && !child {
		lg.Warnf("%v", argErr)
	}
	c = newCrash(cfg, lg, start)
	c.pid, c.tid, c.exe, c.kernelTime, c.signal = ka.PID, ka.TID, ka.Exe, ka.Time, ka.Signal
	c.policy = admitPolicy(cfg)
	for _, err := range []error{cfgErr, argErr} {
		if err != nil {
			c.errs = append(c.errs, err.Error())
		}
	}
	return c, ka, deadline, hard.Stop
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
