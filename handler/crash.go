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

// env is what every crash this process handles shares: the config, the
// log, the admission state, and where the process sits in a supervision.
// The kernel modes make one per process; a server handling many crashes
// (issue 28's coredump socket) would make one and share it.
type env struct {
	cfg    *config.Config
	log    *Logger
	policy admit.Policy // admission's state directory and limits
	drift  func()       // logs drift of the kernel's crash settings; nil offline

	// parent is the supervising parent's pid, in a supervised child (its
	// parent admitted the crash); supervisor is set in the parent once
	// its child has been waited for. Both for the peak RSS of the pair.
	parent     int
	supervisor bool

	inject inject // test builds only (tag unwoundfault): make the child die

	// hard is the hard deadline of a process that handles one crash and
	// exits at it; nil in a supervised child and in the socket server.
	hard *hardDeadline
}

// crash is one crash while its report is built, in every input mode: the
// input it came by (input.go), who crashed, what was read, and what the
// unwinding found. The pipeline (pipeline.go) fills it in.
type crash struct {
	env      *env
	in       *input
	proc     process
	img      image
	out      outcome
	start    time.Time // when the handler started on it: the deadline counts from here
	deadline time.Time

	// Dump mode 0 or 2 (handler.dump_mode_policy): never the command
	// line; with "registers", nothing but the notes.
	noCmdline, registersOnly bool

	saved *os.File // handler.save_core_dir's copy of the core, being written (pipe.go)
}

// process is who crashed: from the kernel's arguments, refined by the
// core's notes and /proc/<pid> while the process is held.
type process struct {
	pid, tid int
	exe      string
	time     int64 // the kernel's %t, 0 when not given
	signal   int
	cmdline  []string
	names    map[int]string // thread names, by tid

	// pidfd is the crashed process's pidfd (%F, pidfd.go), nil without
	// one. noProc is set once it showed /proc/<pid> to be another process
	// (or none): from then on nothing is read there.
	pidfd  *pidfd
	noProc bool
}

// image is what was read of the crashed process: the core's notes, its
// architecture, the memory to unwind and the modules' files.
type image struct {
	core    *coredump.Core
	arch    *arch.Arch
	mem     io.ReaderAt
	mods    []*module.Module
	sources []module.Source
	closers []io.Closer
}

// outcome is what the unwinding found and what went wrong on the way.
type outcome struct {
	results map[int]unwind.Result // by tid
	errs    []string
	partial bool
	mode    string            // live, stream, file, registers, none
	frozen  time.Duration     // how long the process was held
	dropped map[string]int    // crashes not reported since the previous report
	ticket  *admit.Ticket     // the admission, settled once stored or counted lost; nil in a child
	slot    int               // in a supervised child: the parent's admission slot, -1 without one
	cont    *report.Container // the container the process ran in, nil outside one
}

func newCrash(e *env, in *input, start time.Time) *crash {
	c := &crash{env: e, in: in, start: start, deadline: start.Add(e.cfg.Handler.Deadline.D())}
	c.out.slot = -1
	c.proc = process{pid: in.args.PID, tid: in.args.TID, exe: in.args.Exe, time: in.args.Time, signal: in.args.Signal,
		names: map[int]string{}, pidfd: in.pidfd, noProc: !in.held}
	return c
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
	c.img.core = core
	c.globalTIDs()
	var err error
	c.img.arch, err = arch.ByMachine(core.Machine, core.Class)
	return err
}

// coreError is the one place a core that could not be read, or read only
// in part, is said: in the report's errors and the log, marking the
// report partial.
func (c *crash) coreError(err error) {
	c.errorf("reading the core: %v", err)
	c.out.partial = true
}

func (c *crash) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.out.errs = append(c.out.errs, msg)
	c.env.log.Warnf("%s", msg)
}

func (c *crash) close() {
	for _, cl := range c.img.closers {
		cl.Close()
	}
	c.img.closers = nil
}

// load opens a module's file from the crash's sources, once.
func (c *crash) load(m *module.Module) {
	if m.File != nil || m.Err != nil {
		return
	}
	if cl := m.Load(c.img.sources); cl != nil {
		c.img.closers = append(c.img.closers, cl)
	}
}

// threads returns the threads to unwind: the crashing one first (the
// kernel writes it first), capped at max_threads. The cap is applied (and
// said) once: the core's thread list is cut to it.
func (c *crash) threads() []coredump.Thread {
	if n := c.env.cfg.Handler.MaxThreads; len(c.img.core.Threads) > n {
		c.errorf("%d threads, unwinding the first %d (handler.max_threads)", len(c.img.core.Threads), n)
		c.out.partial = true
		c.img.core.Threads = c.img.core.Threads[:n]
	}
	return c.img.core.Threads
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
	if c.out.results == nil {
		c.out.results = map[int]unwind.Result{}
	}
	p := &unwind.Process{Arch: c.img.arch, Modules: c.img.mods, Mem: c.img.mem, Load: c.load}
	threads := c.threads()
	left := 0
	for _, t := range threads {
		if _, done := c.out.results[t.TID]; !done {
			left++
		}
	}
	walk := maxWalk
	for i, t := range threads {
		if _, done := c.out.results[t.TID]; done {
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
		pc, rs, err := c.img.arch.FromPRStatus(t.Regs)
		if err != nil {
			c.out.results[t.TID] = unwind.Result{Stop: "bad_registers", Detail: err.Error()}
			continue
		}
		p.PACMask = t.PACMask
		sm, _ := c.img.mem.(*snapMem)
		if sm != nil {
			sm.missed.Store(false)
		}
		r := unwind.Unwind(p, pc, rs, unwind.Options{
			Thumb:     c.img.arch.Thumb(t.Regs),
			MaxFrames: c.env.cfg.Handler.MaxFrames,
			MaxWalk:   walkShare,
			Deadline:  now.Add(share),
			NoScan:    !c.env.cfg.Handler.StackScan,
		})
		walk -= min(walk, r.Walked)
		if r.Stop == unwind.StopDeadline && time.Now().After(deadline) {
			if final {
				c.out.results[t.TID] = r
				c.out.partial = true
			}
			return
		}
		if r.Stop == unwind.StopDeadline && !final {
			continue // its share of this pass is spent: the final pass walks it again
		}
		if r.Stop == unwind.StopDeadline || (r.Stop == unwind.StopMaxFrames && walkShare < maxWalk) {
			r.Detail = "this thread's share of the handler's deadline and frame budget is spent"
			c.out.partial = true
		} else if final && sm != nil && sm.missed.Load() && r.Stop != unwind.StopMaxFrames {
			// Walked again after the release: the walk ran off the
			// snapshot's window of the stack, which is not the stack's
			// end, whatever the last strategy made of the missing words.
			r.Detail = fmt.Sprintf("the freeze budget (%s) ran out before the walk did, which went on from the snapshot and ran off the stack window kept of this thread (handler.stack_window_kib; %s: %s)",
				c.env.cfg.Handler.FreezeBudget.D(), r.Stop, r.Detail)
			r.Stop = unwind.StopMemory
			c.out.partial = true
		}
		c.out.results[t.TID] = r
	}
}

// maxWalk bounds the frames walked over all threads: a whole 8 MiB stack
// of tiny frames. The deadline bounds the walk too.
const maxWalk = 1 << 20
