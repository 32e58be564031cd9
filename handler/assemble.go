package handler

import (
	"errors"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/internal/regular"
	"github.com/unwound-dev/unwound/internal/version"
	"github.com/unwound-dev/unwound/report"
)

// report assembles the report from what was collected: every mode's, the
// registers-only one (registersResults) and the one of a core that could
// not be used (no core or no arch: the kernel's arguments and the errors,
// marked partial). Only modules that a frame falls in (and the main
// executable) are listed.
func (c *crash) report() *report.Report {
	r := &report.Report{
		Version:   report.Version,
		ID:        report.NewID(),
		Time:      c.proc.time,
		Arch:      "unknown",
		PID:       c.proc.pid,
		TID:       c.proc.tid,
		Exe:       c.proc.exe,
		Cmdline:   c.proc.cmdline,
		Partial:   c.out.partial,
		Handler:   report.Handler{Version: version.Version, Mode: c.out.mode},
		Container: c.out.cont,
	}
	if c.img.arch != nil {
		r.Arch = c.img.arch.Name
	}
	if r.Time == 0 {
		r.Time = time.Now().Unix()
	}
	r.TimeTrusted = report.TrustedTime(r.Time)
	r.Signal = c.signalBlock()
	if core := c.img.core; core != nil {
		if core.PRPSInfo != nil {
			r.Comm = core.PRPSInfo.Fname
			if r.PID == 0 {
				r.PID = core.PRPSInfo.PID
			}
		}
		if r.TID == 0 && len(core.Threads) > 0 {
			r.TID = core.Threads[0].TID
		}
	}
	r.Errors = c.out.errs
	r.BootID = readTrim("/proc/sys/kernel/random/boot_id")
	r.Kernel = readTrim("/proc/sys/kernel/osrelease")
	r.DeviceID = c.env.cfg.DeviceID()
	// os-release(5): the first file that exists, in one small read (a
	// real one is well under the bound; a larger one is cut, not refused).
	for _, p := range osReleasePaths {
		if b, err := regular.ReadFile(p, 8<<10); err == nil {
			r.Release = report.ParseOSRelease(b)
			break
		}
	}
	if a := c.env.cfg.Device.Attributes; len(a) > 0 {
		r.Device = &report.Device{Attributes: a}
	}
	r.Modules, r.Threads = []report.Module{}, []report.Thread{}
	if c.img.core != nil && c.img.arch != nil {
		c.assembleThreads(r)
	} else {
		r.Partial = true
	}
	r.Handler.DurationMS = time.Since(c.start).Milliseconds()
	r.Handler.FrozenMS = c.out.frozen.Milliseconds()
	withholdData(r, c.img.core)
	return r
}

// signalBlock is the signal: from NT_SIGINFO, else the kernel's argument,
// else the crashing thread's prstatus.
func (c *crash) signalBlock() report.Signal {
	var s report.Signal
	sig := c.proc.signal
	if c.img.core != nil {
		if si := c.img.core.SigInfo; si != nil {
			sig = int(si.Signo)
			s.Code = int(si.Code)
			if report.HasFaultAddr(sig, s.Code) {
				a := report.Hex(si.Addr)
				if c.env.cfg.Handler.MaskFaultAddr {
					a = report.MaskToPage(a)
				}
				s.FaultAddr = &a
			}
			s.CodeName = report.CodeName(sig, s.Code)
		} else if sig == 0 && len(c.img.core.Threads) > 0 {
			sig = c.img.core.Threads[0].Signal
		}
	}
	s.Number, s.Name = sig, report.SignalName(sig)
	return s
}

// assembleThreads lists the modules frames fall in, in address order and
// re-indexed, and every thread's frames.
func (c *crash) assembleThreads(r *report.Report) {
	used := map[int]bool{}
	for _, res := range c.out.results {
		for _, f := range res.Frames {
			if f.Module >= 0 {
				used[f.Module] = true
			}
		}
	}
	for i, m := range c.img.mods {
		if module.CleanPath(m.Path) == c.proc.exe && c.proc.exe != "" {
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
		m := c.img.mods[i]
		if m.File == nil && m.Err == nil {
			c.load(m) // the exe, listed for its build ID
		}
		remap[i] = n
		rm := report.Module{
			Path: m.Path, BuildID: m.BuildID, BuildIDKind: m.BuildIDKind,
			Start: report.Hex(m.Start), End: report.Hex(m.End),
			RuntimeOffset: report.Hex(m.RuntimeOffset), CompiledOffset: report.Hex(m.CompiledOffset),
		}
		if err := m.Error(); err != nil {
			rm.Error = err.Error()
		}
		r.Modules = append(r.Modules, rm)
	}
	for i, t := range c.threads() {
		res, ok := c.out.results[t.TID]
		th := report.Thread{TID: t.TID, Name: c.proc.names[t.TID], Crashed: i == 0, Frames: []report.Frame{}}
		if !ok {
			res = unwind.Result{Stop: unwind.StopDeadline}
			r.Partial = true
		}
		th.StopReason, th.StopDetail = res.Stop, res.Detail
		if res.Elided > 0 {
			th.Elided = res.Elided
			th.ElidedAt = (c.env.cfg.Handler.MaxFrames + 1) / 2
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
	if len(r.Threads) > 0 && r.Threads[0].Name == "" {
		r.Threads[0].Name = r.Comm
	}
}

// errNotRead is the module error of a registers-only report.
var errNotRead = errors.New("not read: registers-only report")

// registersResults makes, from the notes alone, what report assembles in
// registers mode: per thread, the PC and the link register (not checked:
// no unwinding takes place), and the modules from NT_FILE they fall in,
// which are not read.
func (c *crash) registersResults() {
	c.out.mode = "registers"
	c.out.partial = true
	if c.img.arch == nil {
		return
	}
	c.img.mods = module.Group(fileMaps(c.img.core))
	for _, m := range c.img.mods {
		m.Err = errNotRead
	}
	if i := c.entryModule(); i >= 0 && c.proc.exe == "" {
		c.proc.exe = module.CleanPath(c.img.mods[i].Path)
	}
	c.out.results = map[int]unwind.Result{}
	for _, t := range c.threads() {
		pc, rs, err := c.img.arch.FromPRStatus(t.Regs)
		if err != nil {
			c.out.results[t.TID] = unwind.Result{Stop: "bad_registers", Detail: err.Error()}
			continue
		}
		thumb := c.img.arch.Thumb(t.Regs)
		if thumb {
			pc &^= 1
		}
		res := unwind.Result{Stop: "registers_only", Frames: []unwind.Frame{
			{PC: pc, Method: "context", Module: module.Find(c.img.mods, pc), Exact: true, Thumb: thumb}}}
		if c.img.arch.LR >= 0 {
			if lr, ok := rs.Get(c.img.arch.LR); ok && lr != 0 {
				lr = c.img.arch.StripPAC(lr, t.PACMask)
				lthumb := c.img.arch.Name == "arm" && lr&1 != 0
				lr &^= 1
				res.Frames = append(res.Frames, unwind.Frame{PC: lr, Method: "lr", Module: module.Find(c.img.mods, lr), Thumb: lthumb,
					Note: "link register at the crash, not checked by an unwind"})
			}
		}
		c.out.results[t.TID] = res
	}
}

// entryModule is the index in c.img.mods of the module holding the program's
// entry point (AT_ENTRY), -1 when none does.
func (c *crash) entryModule() int {
	if entry, ok := c.img.core.AuxvValue(coredump.AT_ENTRY); ok {
		return module.Find(c.img.mods, entry)
	}
	return -1
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// osReleasePaths are where os-release(5) says to look, in order: the
// first is usually a symlink to the second.
var osReleasePaths = []string{"/etc/os-release", "/usr/lib/os-release"}

// minimalReport is the report of a core that cannot be used: the
// kernel's arguments and what went wrong.
func (c *crash) minimalReport() *report.Report {
	c.out.mode, c.out.partial = "none", true
	return c.report()
}
