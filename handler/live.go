package handler

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/unwound-dev/unwound/handler/module"
)

// live unwinds from /proc/<pid>/mem while the kernel waits on the pipe,
// within the freeze budget, then releases the process and finishes from
// the snapshot. It fails when /proc/<pid> is not usable.
func (c *crash) live(release func(), deadline time.Time) error {
	if c.pid <= 0 {
		return errors.New("no pid argument")
	}
	if !c.cfg.Handler.Live {
		return errors.New("handler.live is off")
	}
	// With a pidfd, /proc/<pid> is checked to be the crashed process
	// before the first read and after the last: alive at both, the pid
	// was never free for another process in between.
	if !c.procOK() {
		return errors.New("/proc/<pid> is not the crashed process")
	}
	maps, err := procMaps(c.pid)
	if err != nil {
		return err
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", c.pid))
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
	for _, t := range c.core.Threads {
		names[t.TID] = threadName(c.pid, t.TID)
	}
	exe, exeErr := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.pid))
	var cmdline []string
	if c.cfg.Handler.IncludeCmdline && !c.noCmdline {
		cmdline = procCmdline(c.pid)
	}
	if !c.procOK() {
		return errors.New("/proc/<pid> is not the crashed process")
	}
	c.mode = "live"
	sm := &snapMem{snap: snap, live: mem}
	c.mem = sm
	c.mods = mods
	c.sources = []module.Source{pre}
	c.addVDSO(mapsSize(maps, vdsoBase(c.core)))
	for tid, n := range names {
		c.names[tid] = n
	}
	if exeErr == nil {
		if p, ok := seen[exe]; ok {
			exe = p
		}
		c.exe = exe
	}
	c.cmdline = cmdline
	freeze := c.start.Add(c.cfg.Handler.FreezeBudget.D())
	if freeze.After(deadline) {
		freeze = deadline
	}
	c.unwindThreads(freeze, false)
	sm.released.Store(true)
	release()
	// Threads the freeze budget cut short are walked again from the
	// snapshot: their stack windows, no longer the whole stacks.
	c.unwindThreads(deadline, true)
	return nil
}
