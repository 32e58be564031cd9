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
	c.mode = "live"
	sm := &snapMem{snap: snap, live: mem}
	c.mem = sm
	seen := c.processPaths(maps)
	c.mods = module.Group(maps)
	c.sources = []module.Source{c.preopen(c.mods)}
	c.addVDSO(mapsSize(maps, vdsoBase(c.core)))
	for _, t := range c.core.Threads {
		c.names[t.TID] = threadName(c.pid, t.TID)
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.pid)); err == nil {
		if p, ok := seen[exe]; ok {
			exe = p
		}
		c.exe = exe
	}
	if c.cfg.Handler.IncludeCmdline && !c.noCmdline {
		c.cmdline = procCmdline(c.pid)
	}
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
