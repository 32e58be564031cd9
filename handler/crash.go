package handler

import (
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"golang.org/x/sys/unix"
)

// crash is everything known about one crash while the report is built,
// in every mode: kernel (RunKernel), supervised child (RunChild),
// supervising parent (supervise) and offline (Offline).
type crash struct {
	cfg   *config.Config
	log   *Logger
	core  *coredump.Core
	arch  *arch.Arch
	mode  string // live, stream, file, registers, none
	stdin *os.File

	mem     io.ReaderAt
	mods    []*module.Module
	sources []module.Source
	closers []io.Closer

	pid, tid int
	exe      string
	names    map[int]string // thread names, by tid
	errs     []string
	partial  bool
	start    time.Time

	results map[int]unwind.Result // by tid

	kernelRun // zero offline
}

// kernelRun is what only a crash piped by the kernel has: the kernel's
// arguments, the process held frozen, the admission state and the
// supervision.
type kernelRun struct {
	kernelTime int64
	signal     int
	cmdline    []string
	frozen     time.Duration // how long the process was held

	dropped map[string]int // crashes not reported since the previous report
	policy  admit.Policy
	drift   func() // logs drift of the kernel's crash settings

	// Dump mode 0 or 2 (handler.dump_mode_policy): never the command
	// line; with "registers", nothing but the notes.
	noCmdline, registersOnly bool

	// The supervision (supervise.go), for the peak RSS of both processes:
	// parent is the supervising parent's pid in the child; supervisor is
	// set in the parent once its child has been waited for.
	parent     int
	supervisor bool

	inject inject // test builds only (tag unwoundfault): make the child die
}

func newCrash(cfg *config.Config, lg *Logger, start time.Time) *crash {
	return &crash{cfg: cfg, log: lg, start: start, names: map[int]string{}}
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

// readHeaders reads the core's headers and notes from in (setCore). With
// no core, err says why; else err is what was wrong in the headers (what
// was read is still used).
func (c *crash) readHeaders(in io.Reader) (stream *coredump.Stream, err, archErr error) {
	core, stream, err := coredump.ReadHeader(in, coredump.DefaultLimits)
	if core == nil {
		return nil, err, nil
	}
	return stream, err, c.setCore(core)
}

// setCore takes the core's notes: its thread ids put in the handler's pid
// namespace, its arch found (an error when not supported).
func (c *crash) setCore(core *coredump.Core) error {
	c.core = core
	c.globalTIDs()
	var err error
	c.arch, err = arch.ByMachine(core.Machine, core.Class)
	return err
}

// collect keeps from the core stream what the unwinding needs (the
// stack windows and code pages, collectStream) as the crash's memory.
func (c *crash) collect(stream *coredump.Stream) {
	mem, err := c.collectStream(stream)
	if err != nil {
		// Stacks cut short or missing: what is unwound may stop early.
		c.errorf("core stream: %v", err)
		c.partial = true
	}
	c.mem = mem
}

func (c *crash) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.errs = append(c.errs, msg)
	c.log.Warnf("%s", msg)
}

func (c *crash) close() {
	for _, cl := range c.closers {
		cl.Close()
	}
	c.closers = nil
}

// load opens a module's file from the crash's sources, once.
func (c *crash) load(m *module.Module) {
	if m.File != nil || m.Err != nil {
		return
	}
	if cl := m.Load(c.sources); cl != nil {
		c.closers = append(c.closers, cl)
	}
}

// threads returns the threads to unwind: the crashing one first (the
// kernel writes it first), capped at max_threads. The cap is applied (and
// said) once: the core's thread list is cut to it.
func (c *crash) threads() []coredump.Thread {
	if n := c.cfg.Handler.MaxThreads; len(c.core.Threads) > n {
		c.errorf("%d threads, unwinding the first %d (handler.max_threads)", len(c.core.Threads), n)
		c.partial = true
		c.core.Threads = c.core.Threads[:n]
	}
	return c.core.Threads
}

// unwindThreads walks every thread not walked yet, until deadline. Unless
// final, threads whose walk hit the deadline are forgotten, so a later
// call (with a later deadline, from a snapshot) can walk them again; the
// final call keeps what such a walk found.
func (c *crash) unwindThreads(deadline time.Time, final bool) {
	if c.results == nil {
		c.results = map[int]unwind.Result{}
	}
	p := &unwind.Process{Arch: c.arch, Modules: c.mods, Mem: c.mem, Load: c.load}
	for _, t := range c.threads() {
		if _, done := c.results[t.TID]; done {
			continue
		}
		if time.Now().After(deadline) {
			return
		}
		pc, rs, err := c.arch.FromPRStatus(t.Regs)
		if err != nil {
			c.results[t.TID] = unwind.Result{Stop: "bad_registers", Detail: err.Error()}
			continue
		}
		p.PACMask = t.PACMask
		r := unwind.Unwind(p, pc, rs, unwind.Options{
			Thumb:     thumbState(c.arch, t.Regs),
			MaxFrames: c.cfg.Handler.MaxFrames,
			MaxWalk:   1 << 20, // a whole 8 MiB stack of tiny frames; the deadline bounds it too
			Deadline:  deadline,
		})
		if r.Stop == unwind.StopDeadline {
			if final {
				c.results[t.TID] = r
				c.partial = true
			}
			return
		}
		c.results[t.TID] = r
	}
}

// addVDSO adds the vDSO as a module, loaded from the process's memory: it
// has no file, and holds the signal trampolines on arm64 and riscv64.
func (c *crash) addVDSO(size uint64) {
	base, ok := c.core.AuxvValue(coredump.AT_SYSINFO_EHDR)
	if !ok || base == 0 || size == 0 || size > 1<<20 {
		return
	}
	m := &module.Module{Path: "[vdso]", Start: base, End: base + size,
		Maps: []module.Mapping{{Start: base, End: base + size, Path: "[vdso]"}}, RuntimeOffset: base}
	if err := m.LoadFrom(offsetReader{r: c.mem, base: base, size: int64(size)}); err != nil {
		c.log.Warnf("vdso: %v", err)
	}
	c.mods = append(c.mods, m)
	sort.Slice(c.mods, func(i, j int) bool { return c.mods[i].Start < c.mods[j].Start })
}

// vdsoSize finds the vDSO's extent from the core's segments.
func vdsoSize(core *coredump.Core) uint64 {
	base, ok := core.AuxvValue(coredump.AT_SYSINFO_EHDR)
	if !ok {
		return 0
	}
	for _, s := range core.Segments {
		if s.Vaddr == base {
			return s.Filesz
		}
	}
	return 0
}

// fileMaps turns NT_FILE into mappings.
func fileMaps(core *coredump.Core) []module.Mapping {
	maps := make([]module.Mapping, 0, len(core.Files))
	for _, f := range core.Files {
		maps = append(maps, module.Mapping{Start: f.Start, End: f.End, Offset: f.Offset, Path: f.Path})
	}
	return maps
}
