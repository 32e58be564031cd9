package handler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/sysctl"
	"github.com/unwound-dev/unwound/queue"
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
	// Self is the handler's own binary: when set and handler.supervise is
	// on, the unwinding runs in a child of it (supervise.go).
	Self string
}

// RunKernel handles one crash piped by the kernel. It always returns 0: a
// non-zero exit only makes the kernel log noise, and there is nobody to
// act on it. Everything that goes wrong is logged and, when a report can
// still be written, recorded in it.
func RunKernel(o KernelOptions) int {
	lg := o.Log
	c, ka, deadline, stop := startKernel(lg, o.ConfigPath, o.Args, time.Now(), false)
	defer stop()
	cfg, pol := c.cfg, c.policy
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
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
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

// openStdin makes the pipe non-blocking (so reads honour a deadline) and,
// with save_core_dir set, tees the core into a file there. prefix, when
// not nil, is read before the pipe.
func (c *crash) openStdin(f *os.File, prefix io.Reader, deadline time.Time) (io.Reader, func(), *os.File) {
	c.pipeReader(f, deadline)
	var in io.Reader = &coreReader{prefix: prefix, pipe: c.stdin}
	f = c.stdin
	released := false
	release := func() {
		if !released {
			released = true
			f.Close()
			c.frozen = time.Since(c.start)
		}
	}
	dir := c.cfg.Handler.SaveCoreDir
	if dir == "" {
		return in, release, nil
	}
	name := filepath.Join(dir, fmt.Sprintf("core.%d.%d", c.pid, c.kernelTime))
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		c.errorf("save_core_dir: %v", err)
		return in, release, nil
	}
	c.log.Infof("saving the full core to %s (handler.save_core_dir)", name)
	return io.TeeReader(in, out), release, out
}

// pipeReader returns a reader of the pipe that honours deadline, and sets
// c.stdin to the descriptor to close when the core is no longer needed.
func (c *crash) pipeReader(f *os.File, deadline time.Time) io.Reader {
	var in io.Reader = f
	// A duplicate descriptor in non-blocking mode goes through Go's poller,
	// so reads honour the deadline; the original is closed, the pipe stays
	// open through the duplicate until release.
	if fd, err := unix.Dup(int(f.Fd())); err == nil {
		unix.CloseOnExec(fd)
		if unix.SetNonblock(fd, true) == nil {
			nf := os.NewFile(uintptr(fd), "stdin")
			if nf.SetReadDeadline(deadline) == nil {
				f.Close()
				f, in = nf, nf
			} else {
				nf.Close()
			}
		} else {
			unix.Close(fd)
		}
	}
	c.stdin = f
	return in
}

// coreReader is the core: the bytes a supervising parent already read
// (prefix, nil once drained), then the pipe.
type coreReader struct {
	prefix io.Reader
	pipe   *os.File
	null   int  // /dev/null, opened on the first skip; -1: unusable
	grown  bool // the pipe's buffer was enlarged
}

func (r *coreReader) Read(p []byte) (int, error) {
	if r.prefix != nil {
		n, err := r.prefix.Read(p)
		if err != io.EOF {
			return n, err
		}
		r.prefix = nil
		if n > 0 {
			return n, nil
		}
	}
	return r.pipe.Read(p)
}

// skip discards n bytes of the core. From the pipe it splices them into
// /dev/null: no copy through the handler's memory, one system call per
// pipe buffer (a 1 GiB process streams 1 GiB: with 8 KiB reads into a
// buffer that was 131,072 reads and copies). The pipe is grown to 1 MiB
// (kernel memory, freed as it drains) so each splice moves more.
func (r *coreReader) skip(n int64) (int64, error) {
	if r.null == 0 {
		r.null = -1
		if fd, err := unix.Open("/dev/null", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			r.null = fd
		}
	}
	rc, err := r.pipe.SyscallConn()
	if r.prefix != nil || r.null < 0 || err != nil {
		return io.CopyN(io.Discard, r, n)
	}
	if !r.grown {
		r.grown = true
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
	var done int64
	var serr error
	for done < n && serr == nil {
		err := rc.Read(func(fd uintptr) bool {
			m, e := unix.Splice(int(fd), nil, r.null, nil, int(min(n-done, 1<<20)), unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case e == unix.EAGAIN:
				return false // wait for the kernel to write more
			case e != nil:
				serr = e
			case m == 0:
				serr = io.EOF
			default:
				done += int64(m) // int on 32-bit ARM
			}
			return true
		})
		if err != nil && serr == nil {
			serr = err // the read deadline
		}
	}
	return done, serr
}

// saveCore drains the rest of the core through the tee into the file.
func (c *crash) saveCore(in io.Reader, out *os.File) {
	c.stdin.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.Copy(io.Discard, in); err != nil {
		c.errorf("save_core_dir: %v", err)
	}
	if err := out.Sync(); err != nil {
		c.errorf("save_core_dir: %v", err)
	}
	out.Close()
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
	otherMountNS := c.pid > 0 && namespaceDiffers(c.pid, "mnt")
	if err := c.live(release, deadline); err != nil {
		c.log.Warnf("live memory unusable (%v), reading stacks from the core stream", err)
		c.mode = "stream"
		// While the process is held, its files are opened as it saw them
		// (map_files: a container's files, not the handler's at the same
		// paths); once it is released /proc/<pid> goes away.
		mods := module.Group(fileMaps(core))
		pre := c.preopen(mods)
		c.collect(stream)
		release() // the stacks are in hand: let the kernel finish
		c.mods = mods
		c.sources = append([]module.Source{pre}, module.ProcSources(c.pid)...)
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

// processPaths renames the mappings of /proc/<pid>/maps to the paths the
// process itself sees, from NT_FILE (the kernel writes those relative to
// the crashed process's root; maps shows them relative to the reader's):
// a container's /usr/lib/libc.so.6, not /var/lib/containers/…/usr/lib/….
// It returns the renames, by the handler's path.
func (c *crash) processPaths(maps []module.Mapping) map[string]string {
	type span struct{ start, end uint64 }
	own := map[span]string{}
	for _, f := range c.core.Files {
		own[span{f.Start, f.End}] = f.Path
	}
	renamed := map[string]string{}
	for i, m := range maps {
		if p, ok := own[span{m.Start, m.End}]; ok && m.Path != "" && !strings.HasPrefix(m.Path, "[") && p != m.Path {
			renamed[m.Path] = p
			maps[i].Path = p
		}
	}
	return renamed
}

// preopen opens every module's file now, while /proc/<pid>/map_files
// resolves, and returns a source of those files; they are read only when a
// PC falls in them. A file that could not be opened keeps its reason (a
// FUSE mount that never answers: the timeout) for the report.
func (c *crash) preopen(mods []*module.Module) module.Source {
	type opened struct {
		r   io.ReaderAt
		err error
	}
	pre := map[*module.Module]opened{}
	for _, m := range mods {
		var errs []string
		for _, src := range module.ProcSources(c.pid) {
			r, cl, err := src(m)
			if err == nil {
				pre[m] = opened{r: r}
				c.closers = append(c.closers, cl)
				break
			}
			errs = append(errs, err.Error())
		}
		if _, ok := pre[m]; !ok {
			pre[m] = opened{err: fmt.Errorf("not openable through /proc/%d: %s", c.pid, strings.Join(errs, "; "))}
		}
	}
	return func(m *module.Module) (io.ReaderAt, io.Closer, error) {
		o, ok := pre[m]
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("%s: not openable through /proc/%d", m.Path, c.pid)
		case o.err != nil:
			return nil, nil, o.err
		}
		return o.r, io.NopCloser(nil), nil
	}
}

// globalTIDs rewrites the core's thread ids into the handler's pid
// namespace. The kernel writes each thread's id in the crashed process's
// own namespace (a container's 1, 2, …) while %P and %I are global: the
// report's ids must all be one kind, and /proc/<pid>/task/<tid> takes the
// global ones. /proc/<pid>/task/*/status has both (NSpid: global … own).
func (c *crash) globalTIDs() {
	if c.core == nil || c.pid <= 0 || !namespaceDiffers(c.pid, "pid") {
		return
	}
	dir := fmt.Sprintf("/proc/%d/task", c.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		c.errorf("thread ids stay the container's: %v", err)
		return
	}
	toGlobal := map[int]int{}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
				f := strings.Fields(v)
				if len(f) >= 2 {
					g, err1 := strconv.Atoi(f[0])
					own, err2 := strconv.Atoi(f[len(f)-1])
					if err1 == nil && err2 == nil {
						toGlobal[own] = g
					}
				}
				break
			}
		}
	}
	for i, t := range c.core.Threads {
		if g, ok := toGlobal[t.TID]; ok {
			c.core.Threads[i].TID = g
		}
	}
}

// namespaceDiffers reports whether process pid is known to be in another
// namespace of the kind (mnt, pid) than the handler: false when it cannot
// tell.
func namespaceDiffers(pid int, kind string) bool {
	theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	ours, err2 := os.Readlink("/proc/self/ns/" + kind)
	return err1 == nil && err2 == nil && theirs != ours
}

func vdsoBase(core *coredump.Core) uint64 {
	v, _ := core.AuxvValue(coredump.AT_SYSINFO_EHDR)
	return v
}

// minimalReport is the report of a core that cannot be used: the
// kernel's arguments and what went wrong.
func (c *crash) minimalReport() *report.Report {
	c.mode, c.partial = "none", true
	return c.report()
}

// store writes the report into the queue.
func (c *crash) store(r *report.Report) int {
	if len(c.dropped) > 0 {
		r.Dropped = c.dropped
		c.log.Warnf("crashes not reported since the previous report: %v", c.dropped)
	}
	r.Handler.MaxRSSKiB = c.treeRSS()
	z, err := report.Encode(r)
	if err != nil {
		c.log.Errorf("encoding the report: %v", err)
		return 0
	}
	// Encoding allocates too: measured again, and said again if it grew.
	if kib := c.treeRSS(); kib > r.Handler.MaxRSSKiB {
		r.Handler.MaxRSSKiB = kib
		if z2, err := report.Encode(r); err == nil {
			z = z2
		}
	}
	q, err := queue.Open(c.cfg.Queue.Dir, queue.Options{
		MaxEntries:    c.cfg.Queue.MaxEntries,
		MaxBytes:      int64(c.cfg.Queue.MaxBytesKiB) << 10,
		MinFreeBytes:  int64(c.cfg.Queue.MinFreeKiB) << 10,
		MinFreeInodes: int64(c.cfg.Queue.MinFreeInodes),
		MaxAge:        c.cfg.Queue.MaxAge.D(),
		WhenFull:      c.cfg.Queue.WhenFull,
		AllowVolatile: c.cfg.Queue.AllowVolatile,
	})
	if err != nil {
		c.log.Errorf("report %s for pid %d lost: %v", r.ID, r.PID, err)
		c.lost("queue_unusable")
		return 0
	}
	var crashTime int64
	if r.TimeTrusted {
		crashTime = r.Time
	}
	res, err := q.PutAt(z, r.BootID, crashTime)
	if err != nil {
		c.log.Errorf("report %s for pid %d lost: %v", r.ID, r.PID, err)
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
		c.log.Warnf("queue full: evicted %s", e)
		c.count("evicted")
	}
	for _, e := range res.Expired {
		c.log.Infof("queue: %s is older than queue.max_age, removed", e)
		c.count("expired")
	}
	ct := r.Crashed()
	frames := 0
	if ct != nil {
		frames = len(ct.Frames)
	}
	c.log.Infof("pid %d (%s) %s: report %s, %d frames, %d threads, %s mode, frozen %d ms, %d ms total",
		r.PID, r.Comm, r.Signal.Name, res.Name, frames, len(r.Threads), r.Handler.Mode, r.Handler.FrozenMS, r.Handler.DurationMS)
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
	if c.supervisor && unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) == nil {
		kib += int64(ru.Maxrss)
	}
	if c.parent > 0 {
		// The parent's peak, less the pages of the binary it maps (file
		// or, on an initramfs, shmem pages): the child runs the same
		// binary, so its own figure holds those pages already.
		st := procStatus(c.parent)
		if own := st["VmHWM"] - st["RssFile"] - st["RssShmem"]; own > 0 {
			kib += own
		}
	}
	return kib
}

// procStatus reads the kB fields of /proc/<pid>/status.
func procStatus(pid int) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// count records a report removed from the queue, for the next report.
func (c *crash) count(reason string) {
	if c.policy.Dir != "" {
		admit.Drop(c.policy, reason)
	}
}

// lost counts a report that could not be stored, and gives back the drops
// it carried, so the next report says both.
func (c *crash) lost(reason string) {
	if c.policy.Dir == "" {
		return
	}
	admit.Restore(c.policy, c.dropped)
	admit.Drop(c.policy, reason)
}
