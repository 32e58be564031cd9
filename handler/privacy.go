package handler

import (
	"sort"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/report"
)

// nullPage is the lowest address a program can map (vm.mmap_min_addr is
// at least one page): a PC below it is a call through a NULL (or
// NULL-plus-offset) function pointer and says nothing about memory.
const nullPage = 4096

// codeRanges are the process's executable mappings, from the core's
// program headers (the kernel sets PF_X from VM_EXEC for every mapping,
// dumped or not): the only places a reported PC may point into.
type codeRanges []coredump.Segment

func newCodeRanges(core *coredump.Core) codeRanges {
	if core == nil {
		return nil
	}
	var cr codeRanges
	for _, s := range core.Segments {
		if s.Flags&elf.PF_X != 0 && s.Memsz > 0 && s.Vaddr+s.Memsz > s.Vaddr {
			cr = append(cr, s)
		}
	}
	sort.Slice(cr, func(i, j int) bool { return cr[i].Vaddr < cr[j].Vaddr })
	return cr
}

// find returns the executable mapping holding pc.
func (cr codeRanges) find(pc uint64) (coredump.Segment, bool) {
	i := sort.Search(len(cr), func(i int) bool { return cr[i].Vaddr+cr[i].Memsz > pc })
	if i < len(cr) && cr[i].Vaddr <= pc {
		return cr[i], true
	}
	return coredump.Segment{}, false
}

// withholdData enforces what a report may say about addresses: every
// frame's PC lies in an executable mapping, or in the null page. A PC
// anywhere else came from a data or stack word (a wild jump, a smashed
// return address, a register a program filled with its own data), so
// its value is withheld. A PC in an executable mapping of no file (JIT
// code, [sigpage], an executable stack) is given a module of its own,
// "[anon]", so readers see module + offset rather than a bare address.
//
// Without program headers (a broken core) the modules from the notes are
// the only evidence, and a PC outside them is withheld too.
func withholdData(r *report.Report, core *coredump.Core) {
	cr := newCodeRanges(core)
	type anon struct{ start, end uint64 }
	var anons []anon
	anonIndex := map[uint64]int{}
	inModule := func(f report.Frame) bool {
		return f.Module >= 0 && f.Module < len(r.Modules)
	}
	for ti := range r.Threads {
		fs := r.Threads[ti].Frames
		for fi := range fs {
			f := &fs[fi]
			pc := uint64(f.PC)
			if f.Withheld || pc < nullPage {
				continue
			}
			if len(cr) == 0 {
				if !inModule(*f) {
					withhold(f)
				}
				continue
			}
			seg, ok := cr.find(pc)
			switch {
			case !ok:
				withhold(f)
			case !inModule(*f):
				n, seen := anonIndex[seg.Vaddr]
				if !seen {
					n = len(anons)
					anonIndex[seg.Vaddr] = n
					anons = append(anons, anon{seg.Vaddr, seg.Vaddr + seg.Memsz})
				}
				f.Module = -2 - n // placed below, once modules are re-sorted
			}
		}
	}
	if len(anons) == 0 {
		return
	}
	// Modules stay in address order: merge and re-index.
	type entry struct {
		m   report.Module
		old int
	}
	all := make([]entry, 0, len(r.Modules)+len(anons))
	for i, m := range r.Modules {
		all = append(all, entry{m, i})
	}
	for n, a := range anons {
		all = append(all, entry{report.Module{
			Path: "[anon]", Start: report.Hex(a.start), End: report.Hex(a.end),
			RuntimeOffset: report.Hex(a.start), CompiledOffset: report.Hex(0),
			Error: "executable mapping of no file",
		}, -2 - n})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].m.Start < all[j].m.Start })
	remap := make(map[int]int, len(all))
	r.Modules = r.Modules[:0]
	for i, e := range all {
		remap[e.old] = i
		r.Modules = append(r.Modules, e.m)
	}
	for ti := range r.Threads {
		fs := r.Threads[ti].Frames
		for fi := range fs {
			if m := fs[fi].Module; m >= 0 || m <= -2 {
				fs[fi].Module = remap[m]
			}
		}
	}
}

func withhold(f *report.Frame) {
	f.PC, f.Module, f.Withheld = 0, -1, true
	f.Note = "pc not in an executable mapping: withheld"
}
