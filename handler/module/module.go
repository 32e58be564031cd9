// Package module finds the ELF files mapped into a crashed process, works
// out where each one was loaded, and reads the few parts of each file the
// unwinder needs: its build ID, its unwind tables and, for signal-trampoline
// detection, its code bytes. Nothing else of a file is read.
package module

import (
	"fmt"
	"sort"
	"strings"
)

// Mapping is one file-backed mapping of the process, from NT_FILE or
// /proc/<pid>/maps.
type Mapping struct {
	Start, End uint64
	Offset     uint64 // file offset of Start, in bytes
	Path       string
	Perms      string // "r-xp" from /proc/<pid>/maps, "" from NT_FILE
}

// Module is one ELF file as the process sees it: the runtime range of all
// its mappings and, once loaded, its identity and unwind tables.
type Module struct {
	Path       string
	Start, End uint64    // runtime range covering every mapping of the file
	Maps       []Mapping // in address order

	// RuntimeOffset is Start − Offset of the mapping holding the executable
	// segment; CompiledOffset is p_vaddr − p_offset of that segment. A PC
	// maps to the file's address space as pc − RuntimeOffset + CompiledOffset.
	RuntimeOffset  uint64
	CompiledOffset uint64

	BuildID     string // lowercase hex
	BuildIDKind string // "gnu", or "code" for the fallback hash

	File *File // nil until Load succeeded
	Err  error // why loading failed, for the report
}

// Bias is what to subtract from a runtime address to get the address in the
// file's own address space (its p_vaddr numbering).
func (m *Module) Bias() uint64 { return m.RuntimeOffset - m.CompiledOffset }

// Contains reports whether pc lies in one of the module's mappings.
func (m *Module) Contains(pc uint64) bool {
	if pc < m.Start || pc >= m.End {
		return false
	}
	for _, mp := range m.Maps {
		if pc >= mp.Start && pc < mp.End {
			return true
		}
	}
	return false
}

// Group turns mappings into modules: one per file, in address order. Special
// mappings ("[stack]", "[heap]", anonymous) are left out; the vDSO is added
// by the caller from AT_SYSINFO_EHDR. The kernel's " (deleted)" suffix is
// kept in Path for the report; opening goes through map_files first.
func Group(maps []Mapping) []*Module {
	byPath := map[string]*Module{}
	var mods []*Module
	for _, mp := range maps {
		if mp.Path == "" || strings.HasPrefix(mp.Path, "[") || mp.End <= mp.Start {
			continue
		}
		m := byPath[mp.Path]
		if m == nil {
			m = &Module{Path: mp.Path, Start: mp.Start, End: mp.End}
			byPath[mp.Path] = m
			mods = append(mods, m)
		}
		if mp.Start < m.Start {
			m.Start = mp.Start
		}
		if mp.End > m.End {
			m.End = mp.End
		}
		m.Maps = append(m.Maps, mp)
	}
	for _, m := range mods {
		sort.Slice(m.Maps, func(i, j int) bool { return m.Maps[i].Start < m.Maps[j].Start })
		// Until the file is read, assume the first mapping starts at file
		// offset 0 of a file linked at 0 (a PIE or shared library).
		m.RuntimeOffset = m.Maps[0].Start - m.Maps[0].Offset
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Start < mods[j].Start })
	return mods
}

// Find returns the index of the module containing pc, or -1.
func Find(mods []*Module, pc uint64) int {
	i := sort.Search(len(mods), func(i int) bool { return mods[i].End > pc })
	for ; i < len(mods) && mods[i].Start <= pc; i++ {
		if mods[i].Contains(pc) {
			return i
		}
	}
	return -1
}

// placeFile fixes the module's offsets from the file's executable segment.
//
// A mapping maps file offset mp.Offset at mp.Start, so the mapping that
// holds segment x gives the load bias mp.Start + (x.Off − mp.Offset) −
// x.Vaddr. Several mappings may hold x's file offset: lld (by default) and
// mold pack segments so that one file page is mapped twice, as the tail of
// the r-- segment and the head of the r-x one, at different addresses.
// Each candidate is therefore checked against the whole file: under its
// bias, how many PT_LOAD segments sit at an address whose mapping maps
// their file offset there. The best fit wins; executable permissions (from
// /proc/<pid>/maps; NT_FILE has none) break ties. Candidates and segments
// are capped (a real file has two of the one, a handful of the other), so
// a hostile core listing one path many times costs little.
func (m *Module) placeFile(f *File) error {
	x, ok := f.execSegment()
	if !ok {
		return fmt.Errorf("no executable PT_LOAD")
	}
	m.CompiledOffset = x.Vaddr - x.Off
	const maxCandidates = 16
	best, bestScore, tried := -1, 0, 0
	for i, mp := range m.Maps {
		if x.Off < mp.Offset || x.Off-mp.Offset >= mp.End-mp.Start {
			continue
		}
		if tried++; tried > maxCandidates {
			break
		}
		bias := mp.Start + (x.Off - mp.Offset) - x.Vaddr
		score := 2 * m.fits(f, bias)
		if strings.Contains(mp.Perms, "x") {
			score++
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best >= 0 {
		mp := m.Maps[best]
		m.RuntimeOffset = mp.Start - mp.Offset
		return nil
	}
	// NT_FILE may omit the mapping (a partial dump); fall back to the
	// first mapping, right for every file whose segments keep
	// p_vaddr − p_offset constant (GNU ld's default).
	m.RuntimeOffset = m.Maps[0].Start - m.Maps[0].Offset
	return nil
}

// Error is what the report says went wrong with the module: why its file
// could not be loaded or, once loaded, why its MiniDebugInfo could not be
// used (the unwinder went on with the file's other tables).
func (m *Module) Error() error {
	if m.Err != nil || m.File == nil {
		return m.Err
	}
	return m.File.MiniDebugInfoError()
}

// fits counts the file's PT_LOAD segments (the first 32) whose first byte,
// under the load bias, lies in a mapping that maps the segment's file
// offset there. m.Maps is in address order (Group sorts it).
func (m *Module) fits(f *File, bias uint64) int {
	n := 0
	for i, s := range f.loads {
		if i >= 32 {
			break
		}
		if s.Filesz == 0 {
			continue
		}
		addr := s.Vaddr + bias
		j := sort.Search(len(m.Maps), func(j int) bool { return m.Maps[j].End > addr })
		if j < len(m.Maps) {
			mp := m.Maps[j]
			if addr >= mp.Start && mp.Offset+(addr-mp.Start) == s.Off {
				n++
			}
		}
	}
	return n
}
