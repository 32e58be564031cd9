package handler

import (
	"errors"
	"fmt"
	"os"

	"github.com/unwound-dev/unwound/handler/module"
)

// live unwinds from /proc/<pid>/mem while the kernel waits on the pipe,
// within the freeze budget, then releases the process and finishes from
// the snapshot. It fails when /proc/<pid> is not usable.
func (c *crash) live() error {
	deadline := c.deadline
	if c.proc.pid <= 0 {
		return errors.New("no pid argument")
	}
	if !c.env.cfg.Handler.Live {
		return errors.New("handler.live is off")
	}
	// With a pidfd, /proc/<pid> is checked to be the crashed process
	// before the first read and after the last: alive at both, the pid
	// was never free for another process in between.
	if !c.procOK() {
		return errors.New("/proc/<pid> is not the crashed process")
	}
	maps, err := procMaps(c.proc.pid)
	if err != nil {
		return err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", c.proc.pid))
	if err != nil {
		return err
	}
	defer mem.Close()
	snap, err := c.snapshotLive(mem, maps)
	if err != nil {
		return err
	}
	seen := c.processPaths(maps)
	mods := module.Group(maps)
	pre := c.preopen(mods)
	names := map[int]string{}
	for _, t := range c.img.core.Threads {
		names[t.TID] = threadName(c.proc.pid, t.TID)
	}
	exe, exeErr := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.proc.pid))
	var cmdline []string
	if c.env.cfg.Handler.IncludeCmdline && !c.noCmdline {
		cmdline = procCmdline(c.proc.pid)
	}
	if !c.procOK() {
		return errors.New("/proc/<pid> is not the crashed process")
	}
	c.out.mode = "live"
	sm := &snapMem{snap: snap, live: mem}
	c.img.mem = sm
	c.img.mods = mods
	c.img.sources = []module.Source{pre}
	c.addVDSO(mapsSize(maps, vdsoBase(c.img.core)))
	for tid, n := range names {
		c.proc.names[tid] = n
	}
	if exeErr == nil {
		if p, ok := seen[exe]; ok {
			exe = p
		}
		c.proc.exe = exe
	}
	c.proc.cmdline = cmdline
	freeze := c.start.Add(c.env.cfg.Handler.FreezeBudget.D())
	if freeze.After(deadline) {
		freeze = deadline
	}
	c.unwindThreads(freeze, false)
	sm.released.Store(true)
	c.release()
	// Threads the freeze budget cut short are walked again from the
	// snapshot: their stack windows, no longer the whole stacks.
	c.unwindThreads(deadline, true)
	return nil
}
