package handler

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/report"
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

	// pidfd is the crashed process's pidfd (%F, pidfd.go), nil without
	// one. noProc is set once it showed /proc/<pid> to be another process
	// (or none): from then on nothing is read there.
	pidfd  *pidfd
	noProc bool

	// cont is the container the process ran in (container.go).
	cont *report.Container
}

func newCrash(cfg *config.Config, lg *Logger, start time.Time) *crash {
	return &crash{cfg: cfg, log: lg, start: start, names: map[int]string{}}
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
//
// Each thread gets a share of the time left and of the frame budget: the
// crashed thread (first) half, each other thread an equal part of what
// remains, so a thread that loops or recurses without end cannot take
// the others' frames. A thread cut short by its share says so (stop
// deadline or max_frames) and the report is partial.
func (c *crash) unwindThreads(deadline time.Time, final bool) {
	if c.results == nil {
		c.results = map[int]unwind.Result{}
	}
	p := &unwind.Process{Arch: c.arch, Modules: c.mods, Mem: c.mem, Load: c.load}
	threads := c.threads()
	left := 0
	for _, t := range threads {
		if _, done := c.results[t.TID]; !done {
			left++
		}
	}
	walk := maxWalk
	for i, t := range threads {
		if _, done := c.results[t.TID]; done {
			continue
		}
		now := time.Now()
		if now.After(deadline) {
			return
		}
		share, walkShare := deadline.Sub(now), walk
		if left > 1 {
			if i == 0 {
				share, walkShare = share/2, walk/2
			} else {
				share, walkShare = share/time.Duration(left), walk/left
			}
		}
		left--
		pc, rs, err := c.arch.FromPRStatus(t.Regs)
		if err != nil {
			c.results[t.TID] = unwind.Result{Stop: "bad_registers", Detail: err.Error()}
			continue
		}
		p.PACMask = t.PACMask
		r := unwind.Unwind(p, pc, rs, unwind.Options{
			Thumb:     c.arch.Thumb(t.Regs),
			MaxFrames: c.cfg.Handler.MaxFrames,
			MaxWalk:   walkShare,
			Deadline:  now.Add(share),
			NoScan:    !c.cfg.Handler.StackScan,
		})
		walk -= min(walk, r.Walked)
		if r.Stop == unwind.StopDeadline && time.Now().After(deadline) {
			if final {
				c.results[t.TID] = r
				c.partial = true
			}
			return
		}
		if r.Stop == unwind.StopDeadline && !final {
			continue // its share of this pass is spent: the final pass walks it again
		}
		if r.Stop == unwind.StopDeadline || (r.Stop == unwind.StopMaxFrames && walkShare < maxWalk) {
			r.Detail = "this thread's share of the handler's deadline and frame budget is spent"
			c.partial = true
		}
		c.results[t.TID] = r
	}
}

// maxWalk bounds the frames walked over all threads: a whole 8 MiB stack
// of tiny frames. The deadline bounds the walk too.
const maxWalk = 1 << 20
