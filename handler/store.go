package handler

import (
	"errors"
	"fmt"

	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"golang.org/x/sys/unix"
)

// store writes the report into the queue.
func (c *crash) store(r *report.Report) int {
	if len(c.out.dropped) > 0 {
		r.Dropped = c.out.dropped
		c.env.log.Warnf("crashes not reported since the previous report: %v", c.out.dropped)
	}
	r.Handler.MaxRSSKiB = c.treeRSS()
	z, err := report.Encode(r)
	if err != nil {
		c.env.log.Errorf("report %s for pid %d lost: encoding: %v", r.ID, r.PID, err)
		c.lost("write_error")
		return 0
	}
	// Encoding allocates too: measured again, and said again if it grew.
	if kib := c.treeRSS(); kib > r.Handler.MaxRSSKiB {
		r.Handler.MaxRSSKiB = kib
		if z2, err := report.Encode(r); err == nil {
			z = z2
		}
	}
	q, err := queue.Open(c.env.cfg.Queue.Dir, queue.FromConfig(c.env.cfg.Queue))
	if err != nil {
		c.env.log.Errorf("report %s for pid %d lost: %v", r.ID, r.PID, err)
		c.lost("queue_unusable")
		return 0
	}
	c.env.inject.at("store")
	var crashTime int64
	if r.TimeTrusted {
		crashTime = r.Time
	}
	landed := false
	q.Landed = func(string) {
		landed = true
		if c.out.ticket != nil {
			c.out.ticket.Landed()
		} else if c.env.policy.Dir != "" {
			admit.MarkLanded(c.env.policy.Dir, c.out.slot) // the parent's slot
		}
		c.env.inject.at("landed")
	}
	var res queue.PutResult
	err = c.out.ticket.Commit(func() (err error) {
		res, err = q.PutAt(z, r.BootID, crashTime)
		return err
	})
	if err != nil && landed {
		// An fsync after the rename failed: the report is in the queue
		// (a power cut may still take it), so it is not counted lost.
		c.env.log.Errorf("report %s for pid %d: %v (it is in the queue)", r.ID, r.PID, err)
	} else if err != nil {
		c.env.log.Errorf("report %s for pid %d lost: %v", r.ID, r.PID, err)
		if errors.Is(err, queue.ErrFull) {
			c.lost("queue_full")
		} else {
			c.lost("write_error")
		}
		return 0
	}
	// Evicted and expired reports are never sent: the next report says
	// how many, as it does for dropped crashes.
	for _, e := range res.Evicted {
		c.env.log.Warnf("queue full: evicted %s", e)
		c.count("evicted")
	}
	for _, e := range res.Expired {
		c.env.log.Infof("queue: %s is older than queue.max_age, removed", e)
		c.count("expired")
	}
	ct := r.Crashed()
	frames := 0
	if ct != nil {
		frames = len(ct.Frames)
	}
	via := ""
	if c.proc.pidfd != nil {
		via = " (pidfd)" // /proc/<pid> checked through the pidfd
	}
	c.env.log.Infof("pid %d (%s) %s: report %s, %d frames, %d threads, %s mode%s, frozen %d ms, %d ms total",
		r.PID, r.Comm, r.Signal.Name, res.Name, frames, len(r.Threads), r.Handler.Mode, via, r.Handler.FrozenMS, r.Handler.DurationMS)
	return 0
}

// treeRSS is the peak resident set of the handler's processes in KiB: its
// own and, supervised, the supervising parent's peak so far (VmHWM: it
// waits, holding the notes, while the child works) without the binary's
// pages both map, or, supervising, the waited child's (an upper bound:
// there the binary's pages count twice). The two run at the same time, so
// the sum of their peaks bounds the pair's peak from above.
func (c *crash) treeRSS() int64 {
	var kib int64
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		kib = int64(ru.Maxrss) // int32 on 32-bit ARM
	}
	if c.env.supervisor && unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) == nil {
		kib += int64(ru.Maxrss)
	}
	if c.env.parent > 0 {
		// The parent's peak, less the pages of the binary it maps (file
		// or, on an initramfs, shmem pages): the child runs the same
		// binary, so its own figure holds those pages already.
		st := procStatus(fmt.Sprintf("/proc/%d/status", c.env.parent))
		if own := statusKiB(st, "VmHWM") - statusKiB(st, "RssFile") - statusKiB(st, "RssShmem"); own > 0 {
			kib += own
		}
	}
	return kib
}

// count records a report removed from the queue, for the next report.
func (c *crash) count(reason string) {
	if c.env.policy.Dir != "" {
		admit.Drop(c.env.policy, reason)
	}
}

// lost counts a report that could not be stored, and gives back the drops
// it carried, so the next report says both.
func (c *crash) lost(reason string) {
	if c.env.policy.Dir == "" {
		return
	}
	if c.out.ticket != nil {
		c.out.ticket.Settle(reason, 0)
		return
	}
	// A supervised child: its parent holds the ticket, and settles it
	// once the child says it is done.
	admit.Lost(c.env.policy, c.out.dropped, reason)
}
