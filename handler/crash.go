package handler

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/internal/version"
	"github.com/unwound-dev/unwound/report"
)

// crash is everything known about one crash while the report is built.
type crash struct {
	cfg   *config.Config
	log   *Logger
	core  *coredump.Core
	arch  *arch.Arch
	mode  string // live, stream, file
	stdin *os.File

	mem     io.ReaderAt
	mods    []*module.Module
	sources []module.Source
	closers []io.Closer

	pid, tid   int
	exe        string
	names      map[int]string // thread names, by tid
	cmdline    []string
	errs       []string
	partial    bool
	start      time.Time
	frozen     time.Duration
	kernelTime int64
	signal     int

	results map[int]unwind.Result // by tid

	dropped map[string]int // crashes not reported since the previous report
	policy  admit.Policy
	drift   func() // logs drift of the kernel's crash settings (kernel mode)

	// Dump mode 0 or 2 (handler.dump_mode_policy): never the command
	// line; with "registers", nothing but the notes.
	noCmdline, registersOnly bool

	// The supervision (supervise.go), for the peak RSS of both processes:
	// parent is the supervising parent's pid in the child; supervisor is
	// set in the parent once its child has been waited for.
	parent     int
	supervisor bool

	fault fault // test builds only (tag unwoundfault): make the child die
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
		thumb := false
		if i := c.arch.PRStatusCPSR; i >= 0 && i < len(t.Regs) {
			thumb = t.Regs[i]&0x20 != 0
		}
		r := unwind.Unwind(p, pc, rs, unwind.Options{
			Thumb:     thumb,
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

// report assembles the report from what was collected. Only modules that
// a frame falls in (and the main executable) are listed.
func (c *crash) report() *report.Report {
	now := time.Now()
	r := &report.Report{
		Version: report.Version,
		ID:      report.NewID(),
		Time:    c.kernelTime,
		Arch:    c.arch.Name,
		PID:     c.pid,
		TID:     c.tid,
		Exe:     c.exe,
		Cmdline: c.cmdline,
		Partial: c.partial,
		Handler: report.Handler{Version: version.Version, Mode: c.mode},
	}
	if r.Time == 0 {
		r.Time = now.Unix()
	}
	r.TimeTrusted = report.TrustedTime(r.Time)
	if c.core.PRPSInfo != nil {
		r.Comm = c.core.PRPSInfo.Fname
		if r.PID == 0 {
			r.PID = c.core.PRPSInfo.PID
		}
	}
	if r.TID == 0 && len(c.core.Threads) > 0 {
		r.TID = c.core.Threads[0].TID
	}
	sig := c.signal
	if si := c.core.SigInfo; si != nil {
		sig = int(si.Signo)
		r.Signal.Code = int(si.Code)
		if report.HasFaultAddr(sig, r.Signal.Code) {
			a := report.Hex(si.Addr)
			if c.cfg.Handler.MaskFaultAddr {
				a = report.MaskToPage(a)
			}
			r.Signal.FaultAddr = &a
		}
		r.Signal.CodeName = report.CodeName(sig, r.Signal.Code)
	} else if sig == 0 && len(c.core.Threads) > 0 {
		sig = c.core.Threads[0].Signal
	}
	r.Signal.Number, r.Signal.Name = sig, report.SignalName(sig)

	// Modules referenced by frames, in address order, re-indexed.
	used := map[int]bool{}
	for _, res := range c.results {
		for _, f := range res.Frames {
			if f.Module >= 0 {
				used[f.Module] = true
			}
		}
	}
	for i, m := range c.mods {
		if cleanDeleted(m.Path) == c.exe && c.exe != "" {
			used[i] = true
		}
	}
	idx := make([]int, 0, len(used))
	for i := range used {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	remap := map[int]int{}
	for n, i := range idx {
		m := c.mods[i]
		if m.File == nil && m.Err == nil {
			c.load(m) // the exe, listed for its build ID
		}
		remap[i] = n
		rm := report.Module{
			Path: m.Path, BuildID: m.BuildID, BuildIDKind: m.BuildIDKind,
			Start: report.Hex(m.Start), End: report.Hex(m.End),
			RuntimeOffset: report.Hex(m.RuntimeOffset), CompiledOffset: report.Hex(m.CompiledOffset),
		}
		if m.Err != nil {
			rm.Error = m.Err.Error()
		}
		r.Modules = append(r.Modules, rm)
	}
	if r.Modules == nil {
		r.Modules = []report.Module{}
	}
	for i, t := range c.threads() {
		res, ok := c.results[t.TID]
		th := report.Thread{TID: t.TID, Name: c.names[t.TID], Crashed: i == 0, Frames: []report.Frame{}}
		if !ok {
			res = unwind.Result{Stop: unwind.StopDeadline}
			r.Partial = true
		}
		th.StopReason, th.StopDetail = res.Stop, res.Detail
		if res.Elided > 0 {
			th.Elided = res.Elided
			th.ElidedAt = (c.cfg.Handler.MaxFrames + 1) / 2
		}
		for _, f := range res.Frames {
			rf := report.Frame{PC: report.Hex(f.PC), Method: f.Method, Trust: f.Trust.String(), Module: -1, Exact: f.Exact, Thumb: f.Thumb, Note: f.Note}
			if f.Module >= 0 {
				rf.Module = remap[f.Module]
			}
			th.Frames = append(th.Frames, rf)
		}
		r.Threads = append(r.Threads, th)
	}
	if i := len(r.Threads); i > 0 && r.Threads[0].Name == "" {
		r.Threads[0].Name = r.Comm
	}
	r.Errors = c.errs
	r.BootID = readTrim("/proc/sys/kernel/random/boot_id")
	r.Kernel = readTrim("/proc/sys/kernel/osrelease")
	r.DeviceID = c.cfg.DeviceID()
	r.Handler.DurationMS = time.Since(c.start).Milliseconds()
	r.Handler.FrozenMS = c.frozen.Milliseconds()
	withholdData(r, c.core)
	return r
}

func cleanDeleted(p string) string { return strings.TrimSuffix(p, " (deleted)") }

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
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
