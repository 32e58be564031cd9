package handler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/report"
)

// pipeline is the one way a crash becomes a report, whatever its input
// mode (input.go): admission, then work (unwindHere: read the core,
// capture its memory, unwind and assemble; or supervise, which has a
// child do that and reports only when the child could not), then the
// process released, the report stored in the queue and logged. Offline
// inputs are neither admitted nor stored: the report is returned. nil
// when no report was made here: the crash was not admitted, or a
// supervised child stored its own.
func (c *crash) pipeline(work func(*crash) *report.Report) *report.Report {
	if c.in.queued {
		c.privilege()
		// A supervised child's parent admitted the crash already.
		if c.env.parent == 0 {
			ticket, ok := c.admit()
			if !ok {
				return nil
			}
			// The ticket is settled before its slot is released: by
			// the store (stored, or lost and counted), below when a
			// supervised child stored the report, or at the hard
			// deadline. One released unsettled (a panic) is counted
			// as handler_killed by the next admission.
			defer ticket.Release()
			c.out.ticket = ticket
			c.env.hard.hold(ticket)
		}
	}
	r := work(c)
	if c.saved != nil {
		// Debug mode: the process was held until the whole core is in
		// the file.
		c.saveCore()
		if r != nil {
			r.Handler.FrozenMS = c.out.frozen.Milliseconds()
		}
	}
	c.release()
	c.close()
	// Once the process is released: a few small reads, never on its time.
	// A supervisor's child logged them already.
	if c.env.drift != nil && !c.env.supervisor {
		c.env.drift()
	}
	if r != nil && c.in.queued {
		c.store(r)
	}
	if r == nil {
		c.out.ticket.Settle("", 0) // the supervised child stored it
	}
	return r
}

// privilege applies handler.dump_mode_policy to a process that changed
// credentials (setuid, a daemon dropping root). It is dumped with %d = 2
// only under fs.suid_dumpable = 2; 0 is never piped by current kernels.
// Its memory may hold another user's secrets (configs/unwound.toml).
func (c *crash) privilege() {
	if c.in.nargs <= 4 || c.in.args.Dumpable == 1 {
		return
	}
	c.noCmdline = true
	if c.env.cfg.Handler.DumpModePolicy == "registers" {
		// Notes only: no memory of the process, none of its files.
		c.registersOnly = true
		c.out.errs = append(c.out.errs, fmt.Sprintf("dump mode %d: registers only (handler.dump_mode_policy)", c.in.args.Dumpable))
	}
}

// admit decides from who crashed alone, before any heavy work, whether
// the crash is reported: handler.honor_rlimit_core, the dump mode policy,
// the rate limits. When it is not, the process is let go at once.
func (c *crash) admit() (*admit.Ticket, bool) {
	cfg, lg, ka, pol := c.env.cfg, c.env.log, c.in.args, c.env.policy
	if cfg.Handler.HonorRlimit && ka.RlimitCore == 0 && c.in.nargs > 5 {
		lg.Infof("pid %d (%s): RLIMIT_CORE is 0, not reporting (handler.honor_rlimit_core)", ka.PID, ka.Comm)
		c.release()
		return nil, false
	}
	if c.noCmdline && cfg.Handler.DumpModePolicy == "drop" {
		lg.Infof("pid %d (%s): dump mode %d, not reporting (handler.dump_mode_policy)", ka.PID, ka.Comm, ka.Dumpable)
		c.release()
		if os.MkdirAll(pol.Dir, 0o700) == nil {
			admit.Drop(pol, "dump_mode")
		}
		return nil, false
	}
	exeKey := ka.Exe
	if exeKey == "" {
		exeKey = ka.Comm
	}
	ticket, err := admit.Check(pol, exeKey)
	var dropped *admit.ErrDropped
	if errors.As(err, &dropped) {
		// Closing the pipe ends the dump at once and frees the process.
		c.release()
		lg.Warnf("pid %d (%s): %v", ka.PID, ka.Exe, err)
		return nil, false
	}
	if err != nil {
		lg.Warnf("%v", err)
	}
	c.out.dropped = ticket.Dropped
	return ticket, true
}

// release ends the dump: closing the pipe lets the kernel finish and frees
// the process. Not while the core is being saved (saveCore releases).
func (c *crash) release() {
	if c.in.closer == nil || c.saved != nil {
		return
	}
	c.in.closer.Close()
	c.in.closer = nil
	c.out.frozen = time.Since(c.start)
}

// unwindHere is the work of the pipeline in this process: read the core's
// headers and notes, capture the memory the unwinding needs (live from
// /proc/<pid> while the process is held, else from the core stream or
// file), unwind every thread and assemble the report.
func (c *crash) unwindHere() *report.Report {
	c.teeCore()
	stream, err, archErr := c.readCore()
	if err != nil {
		c.coreError(err)
	}
	core := c.img.core
	if core == nil {
		return c.minimalReport()
	}
	if c.registersOnly {
		c.release()
		c.registersResults()
		return c.report()
	}
	c.env.inject.at("unwind")
	if archErr == nil && !c.in.held && len(core.Threads) == 0 {
		archErr = errors.New("no thread in the core")
	}
	if archErr != nil {
		c.coreError(archErr)
		return c.minimalReport()
	}
	if c.proc.pid == 0 && core.PRPSInfo != nil {
		c.proc.pid = core.PRPSInfo.PID // offline: the core's own
	}
	if c.proc.tid == 0 && len(core.Threads) > 0 {
		c.proc.tid = core.Threads[0].TID
	}
	module.SetIODeadline(c.deadline)
	switch {
	case c.in.held:
		if stream != nil && c.in.skip != nil {
			// What is not kept is spliced into /dev/null, never copied.
			stream.Skip = func(_ io.Reader, n int64) (int64, error) { return c.in.skip(n) }
		}
		if c.captureHeld(stream) {
			return c.report() // unwound live
		}
	case stream == nil:
		c.out.mode = "file"
		c.placeModules()
	default:
		c.out.mode = "stream"
		c.collect(stream)
		c.placeModules()
	}
	c.addVDSO(vdsoSize(core))
	c.unwindThreads(c.deadline, true)
	return c.report()
}

// readCore reads the core's headers and notes: streamed, returning the
// stream for the memory that follows, or from the file, whose memory is
// then read at random. With no core, err says why; else err is what was
// wrong in the headers, and archErr an architecture not supported.
func (c *crash) readCore() (stream *coredump.Stream, err, archErr error) {
	if c.in.file == nil {
		stream, err, archErr = c.readHeaders(c.in.stream)
		if stream != nil {
			stream.Deadline = c.deadline
		}
		return stream, err, archErr
	}
	st, err := c.in.file.Stat()
	if err != nil {
		return nil, err, nil
	}
	core, mem, err := coredump.OpenFile(c.in.file, st.Size(), coredump.DefaultLimits)
	if core == nil {
		return nil, err, nil
	}
	c.img.mem = newPageCache(mem)
	return nil, err, c.setCore(core)
}

// placeModules finds the modules' files under the input's sysroot, when
// the process is not there to give them.
func (c *crash) placeModules() {
	if err := c.offlineModules(c.in.root); err != nil {
		c.errorf("%v", err)
	}
}

// captureHeld captures the memory of a process the kernel holds: live from
// /proc/<pid>/mem within the freeze budget (live.go), which also unwinds;
// when that cannot be, from the core (the stack windows of the stream, or
// the file), the files through /proc/<pid> while it lasts. It reports
// whether it unwound.
func (c *crash) captureHeld(stream *coredump.Stream) bool {
	otherMountNS := c.procOK() && namespaceDiffers(c.proc.pid, "mnt")
	c.out.cont = c.container()
	err := c.live()
	if err == nil {
		return true
	}
	c.out.mode = "file"
	if stream != nil {
		c.out.mode = "stream"
	}
	c.env.log.Warnf("live memory unusable (%v), reading stacks from the core %s", err, c.out.mode)
	// While the process is held, its files are opened as it saw them
	// (map_files: a container's files, not the handler's at the same
	// paths); once it is released /proc/<pid> goes away.
	mods := module.Group(fileMaps(c.img.core))
	var pre []module.Source
	if !c.proc.noProc {
		pre = []module.Source{c.preopen(mods)}
	}
	if !c.procOK() {
		pre = nil // files of another process
	}
	if stream != nil {
		c.collect(stream)
	}
	c.release() // the stacks are in hand: let the kernel finish
	c.img.mods = mods
	c.img.sources = append(pre, c.procSources()...)
	if !otherMountNS {
		// /proc/<pid> unusable (the process is gone): its files are
		// taken from the handler's own root, unless it was seen in
		// another mount namespace (a container), whose files at the
		// same paths are other files.
		c.img.sources = append(c.img.sources, module.SysrootSource("/", nil))
	}
	return false
}
