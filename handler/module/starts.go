package module

import (
	"strings"

	"github.com/unwound-dev/unwound/elf"
)

// InCode reports whether the runtime address pc lies in the module's
// executable code: the file's executable segment once the file is loaded,
// else a mapping whose permissions say x (live mode's /proc/<pid>/maps).
// Heuristic unwinding keeps only return addresses that pass this test.
func (m *Module) InCode(pc uint64) bool {
	if !m.Contains(pc) {
		return false
	}
	if m.File != nil {
		v := pc - m.Bias()
		for _, s := range m.File.loads {
			if s.Flags&elf.PF_X != 0 && v >= s.Vaddr && v-s.Vaddr < s.Filesz {
				return true
			}
		}
		return false
	}
	for _, mp := range m.Maps {
		if pc >= mp.Start && pc < mp.End {
			return strings.Contains(mp.Perms, "x")
		}
	}
	return false
}

// StartBefore returns the highest known function start at or below the
// file address vaddr, from every source the file has: symbols (.symtab,
// .dynsym), .ARM.exidx entries and FDEs (.eh_frame, .debug_frame). Call-site
// validation uses it: no function may start between a call's target and
// the PC it is said to reach.
func (f *File) StartBefore(vaddr uint64) (uint64, bool) {
	best, found := f.FuncStart(vaddr)
	take := func(v uint64, ok bool) {
		if ok && v <= vaddr && (!found || v > best) {
			best, found = v, true
		}
	}
	if f.EHABI != nil {
		take(f.EHABI.StartBefore(vaddr))
	}
	if f.EHFrame != nil {
		take(f.EHFrame.StartBefore(vaddr))
	}
	if f.DebugFrame != nil {
		take(f.DebugFrame.StartBefore(vaddr))
	}
	return best, found
}
