package handler

import (
	"fmt"
	"os"
	"sort"

	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
)

// stackWindows returns, per thread, the stack range to keep: from SP up by
// the configured window (four times that for the crashing thread, whose
// stack matters most and may be deep).
func (c *crash) stackWindows() []coredump.Range {
	win := uint64(c.env.cfg.Handler.StackWindowKiB) << 10
	var rs []coredump.Range
	for i, t := range c.threads() {
		_, regs, err := c.img.arch.FromPRStatus(t.Regs)
		if err != nil {
			continue
		}
		sp, ok := regs.Get(c.img.arch.SP)
		if !ok || sp == 0 {
			continue
		}
		w := win
		if i == 0 {
			w *= 4
		}
		hi := sp + w
		if hi < sp {
			hi = ^uint64(0)
		}
		// A thread's frames are in its own stack mapping: the window
		// stops at its end, as it does in live mode, instead of running
		// on into the next thread's stack (64 threads would keep 16 MiB,
		// mostly other stacks' untouched pages).
		for _, s := range c.img.core.Segments {
			if sp >= s.Vaddr && sp < s.Vaddr+s.Memsz && s.Vaddr+s.Memsz < hi {
				hi = s.Vaddr + s.Memsz
			}
		}
		rs = append(rs, coredump.Range{Lo: sp, Hi: hi})
	}
	// A handler on a sigaltstack returns to the main stack, whose SP only
	// the signal frame knows. Keep the top of the main stack too: it holds
	// the auxiliary vector's strings (AT_EXECFN), and main's callers.
	if top, ok := c.img.core.AuxvValue(coredump.AT_EXECFN); ok && top > 4*win {
		for _, s := range c.img.core.Segments {
			if top >= s.Vaddr && top < s.Vaddr+s.Memsz {
				lo := s.Vaddr + s.Memsz - 4*win
				if lo < s.Vaddr {
					lo = s.Vaddr
				}
				rs = append(rs, coredump.Range{Lo: lo, Hi: s.Vaddr + s.Memsz})
			}
		}
	}
	return mergeRanges(rs)
}

func mergeRanges(rs []coredump.Range) []coredump.Range {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Lo < rs[j].Lo })
	var out []coredump.Range
	for _, r := range rs {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi {
			if r.Hi > out[n-1].Hi {
				out[n-1].Hi = r.Hi
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// isCodePage reports whether a segment is kernel-provided code that the
// core carries and the unwinder needs: the vDSO, ARM's [sigpage].
func (c *crash) isCodePage(s coredump.Segment) bool {
	if base, ok := c.img.core.AuxvValue(coredump.AT_SYSINFO_EHDR); ok && s.Vaddr == base {
		return true
	}
	if s.Flags&4 /* PF_R */ == 0 || s.Flags&1 /* PF_X */ == 0 || s.Filesz > 64<<10 {
		return false
	}
	for _, f := range c.img.core.Files {
		if s.Vaddr < f.End && f.Start < s.Vaddr+s.Memsz {
			return false
		}
	}
	return true
}

// collectStream keeps the stack windows and the code pages from the core
// stream, discarding the rest as it passes.
func (c *crash) collectStream(s *coredump.Stream) (*coredump.Memory, error) {
	wins := c.stackWindows()
	want := func(seg coredump.Segment) []coredump.Range {
		if c.isCodePage(seg) {
			return []coredump.Range{{Lo: seg.Vaddr, Hi: seg.Vaddr + seg.Filesz}}
		}
		var out []coredump.Range
		for _, w := range wins {
			if w.Lo < seg.Vaddr+seg.Memsz && seg.Vaddr < w.Hi {
				out = append(out, w)
			}
		}
		return out
	}
	budget := int64(len(wins)+2) * int64(c.env.cfg.Handler.StackWindowKiB) << 12
	return s.Collect(c.img.core.Segments, want, budget+4<<20)
}

// snapshotLive copies each thread's stack window and the vDSO out of
// /proc/<pid>/mem, bounded by the mappings that hold them.
func (c *crash) snapshotLive(mem *os.File, maps []module.Mapping) (*coredump.Memory, error) {
	snap := &coredump.Memory{}
	find := func(addr uint64) (module.Mapping, bool) {
		for _, m := range maps {
			if addr >= m.Start && addr < m.End {
				return m, true
			}
		}
		return module.Mapping{}, false
	}
	var got int
	for _, w := range c.stackWindows() {
		m, ok := find(w.Lo)
		if !ok {
			// A stack overflow leaves SP in the guard gap below the stack
			// (stack_guard_gap, 256 pages by default): start at the stack.
			for _, mm := range maps {
				if mm.Start > w.Lo && mm.Start-w.Lo <= 1<<20 && (!ok || mm.Start < m.Start) {
					m, ok = mm, true
				}
			}
			if !ok {
				continue
			}
			w.Lo = m.Start
		}
		hi := w.Hi
		if hi > m.End {
			hi = m.End
		}
		b := make([]byte, hi-w.Lo)
		n, err := mem.ReadAt(b, int64(w.Lo))
		if n > 0 {
			snap.Add(w.Lo, b[:n])
			got++
		} else if err != nil {
			return nil, fmt.Errorf("/proc/%d/mem at %#x: %w", c.proc.pid, w.Lo, err)
		}
	}
	if base, ok := c.img.core.AuxvValue(coredump.AT_SYSINFO_EHDR); ok && base != 0 {
		if m, ok := find(base); ok && m.End-base <= 1<<20 {
			b := make([]byte, m.End-base)
			if n, _ := mem.ReadAt(b, int64(base)); n == len(b) {
				snap.Add(base, b)
			}
		}
	}
	if got == 0 {
		return nil, fmt.Errorf("/proc/%d/mem: no stack readable", c.proc.pid)
	}
	return snap, nil
}

// mapsSize returns the extent of the mapping starting at addr.
func mapsSize(maps []module.Mapping, addr uint64) uint64 {
	for _, m := range maps {
		if m.Start == addr {
			return m.End - m.Start
		}
	}
	return 0
}

// collect keeps from the core stream what the unwinding needs (the
// stack windows and code pages, collectStream) as the crash's memory.
func (c *crash) collect(stream *coredump.Stream) {
	mem, err := c.collectStream(stream)
	if err != nil {
		// Stacks cut short or missing: what is unwound may stop early.
		c.errorf("core stream: %v", err)
		c.out.partial = true
	}
	c.img.mem = mem
}

// addVDSO adds the vDSO as a module, loaded from the process's memory: it
// has no file, and holds the signal trampolines on arm64 and riscv64.
func (c *crash) addVDSO(size uint64) {
	base, ok := c.img.core.AuxvValue(coredump.AT_SYSINFO_EHDR)
	if !ok || base == 0 || size == 0 || size > 1<<20 {
		return
	}
	m := &module.Module{Path: "[vdso]", Start: base, End: base + size,
		Maps: []module.Mapping{{Start: base, End: base + size, Path: "[vdso]"}}, RuntimeOffset: base}
	if err := m.LoadFrom(offsetReader{r: c.img.mem, base: base, size: int64(size)}); err != nil {
		c.env.log.Warnf("vdso: %v", err)
	}
	c.img.mods = append(c.img.mods, m)
	sort.Slice(c.img.mods, func(i, j int) bool { return c.img.mods[i].Start < c.img.mods[j].Start })
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

func vdsoBase(core *coredump.Core) uint64 {
	v, _ := core.AuxvValue(coredump.AT_SYSINFO_EHDR)
	return v
}
