// Package symbolize turns the PCs of an unwound report into functions,
// source files and lines, on the host, from the debug files a build
// produces. It finds debug files the way gdb does (build-id tree,
// path-mirroring debug directories, Yocto's .debug/ directories,
// .gnu_debuglink, the binary itself), always checks them against the
// report's build ID, and reads DWARF line tables and inlined-call trees,
// falling back to .symtab, MiniDebugInfo (.gnu_debugdata) and .dynsym.
// docs/symbolize.md describes the lookup order and the output.
//
// This package runs on the host only; the handler never imports it.
package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ianlancetaylor/demangle"
	"github.com/unwound-dev/unwound/report"
)

// Options say where debug files are.
type Options struct {
	// DebugDirs are gdb's debug-file-directory: each may hold a
	// .build-id/xx/rest.debug tree and path-mirroring <dir>/<path>.debug
	// files (Yocto's -dbg packages with PACKAGE_DEBUG_SPLIT_STYLE
	// debug-file-directory).
	DebugDirs []string
	// Sysroot is the target's root filesystem on the host: report paths
	// are looked up under it (default /).
	Sysroot string
	// Debuginfod, when set, is asked for debug files by GNU build ID when
	// none is found on disk (DebuginfodFromEnv: DEBUGINFOD_URLS).
	Debuginfod *Debuginfod
	// IndexDir, when set, keeps the inflated DWARF sections of
	// compressed debug files by build ID, so that the next process skips
	// inflating them (DefaultIndexDir: UNWOUND_CACHE/symindex).
	IndexDir string
}

// DefaultIndexDir is where the unwound command keeps its on-disk index:
// $UNWOUND_CACHE/symindex, else the user cache directory's
// unwound/symindex; "" when there is none.
func DefaultIndexDir() string {
	if d := os.Getenv("UNWOUND_CACHE"); d != "" {
		return filepath.Join(d, "symindex")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "unwound", "symindex")
	}
	return ""
}

// Symbolizer symbolizes reports, keeping opened files per build ID.
type Symbolizer struct {
	opts  Options
	mu    sync.Mutex // one Symbolize at a time: units are read as PCs need them
	cache map[string]*module
}

// module is one report module's opened files.
type module struct {
	binary     *elfFile   // the file itself, under the sysroot
	debug      *elfFile   // the file with DWARF, nil when none
	how        string     // how debug was found
	files      []*elfFile // every verified file, debug file first
	dwarf      *dwarfIndex
	syms       *symtab // nil until symbols() reads them
	status     string  // non-empty: nothing usable, and why
	notes      []string
	mismatches []string
}

// New returns a Symbolizer. Close it to release the files it opened.
func New(opts Options) *Symbolizer {
	return &Symbolizer{opts: opts, cache: map[string]*module{}}
}

// Close closes every opened file.
//
// A Symbolizer stays usable after Close, with nothing cached: a
// collector whose symbol store changed (its generation file) closes it
// so that modules without debug files are looked up again.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.cache {
		for _, f := range m.files {
			f.Close()
		}
	}
	s.cache = map[string]*module{}
	return nil
}

func cacheKey(m report.Module) string {
	if m.BuildID != "" {
		return m.BuildIDKind + ":" + strings.ToLower(m.BuildID)
	}
	return "path:" + m.Path
}

func (s *Symbolizer) module(m report.Module) *module {
	k := cacheKey(m)
	if mod, ok := s.cache[k]; ok {
		return mod
	}
	mod := s.load(m)
	s.cache[k] = mod
	return mod
}

// Result is a report with symbols: the report's own fields, and per module
// and per frame what was found. Its JSON is the report's JSON with fields
// added.
type Result struct {
	*report.Report
	Modules []Module `json:"modules"`
	Threads []Thread `json:"threads"`
}

// Module is a report module and the files its symbols came from.
type Module struct {
	report.Module
	DebugFile  string   `json:"debug_file,omitempty"` // the file DWARF was read from
	DebugHow   string   `json:"debug_how,omitempty"`  // build-id, debug-dir, .debug, debuglink, debuginfod, binary
	Symbols    string   `json:"symbols,omitempty"`    // symbol tables used: .symtab, .gnu_debugdata, .dynsym
	Status     string   `json:"status,omitempty"`     // why there are no symbols
	Notes      []string `json:"notes,omitempty"`      // warnings (unverified, broken DWARF)
	Mismatches []string `json:"mismatches,omitempty"` // files found and refused
}

// Thread is a report thread with symbolized frames.
type Thread struct {
	report.Thread
	Frames []Frame `json:"frames"`
}

// Frame is a report frame with its symbols.
type Frame struct {
	report.Frame
	// Addr is the file address looked up: pc - runtime_offset +
	// compiled_offset, minus 1 for return addresses (exact == false).
	Addr *report.Hex `json:"addr,omitempty"`
	// Locations are innermost first: inlined calls (inlined: true), then
	// the function the code belongs to. Empty when nothing is known.
	Locations []Location `json:"locations,omitempty"`
	// Error says why there are no symbols (or no lines).
	Error string `json:"error,omitempty"`
}

// Location is one function and source position.
type Location struct {
	Function string `json:"function,omitempty"` // demangled
	Mangled  string `json:"mangled,omitempty"`  // the linkage name, when it differs
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Inlined  bool   `json:"inlined,omitempty"`
	// Offset is addr's offset from the symbol's start, for symbol-table
	// results (no DWARF).
	Offset *report.Hex `json:"offset,omitempty"`
	Source string      `json:"source"` // dwarf, .symtab, .gnu_debugdata, .dynsym
}

// Symbolize symbolizes every frame of r. It never fails as a whole: a
// frame that cannot be symbolized says why.
// It is safe to call from several goroutines; calls run one at a time.
func (s *Symbolizer) Symbolize(r *report.Report) *Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &Result{Report: r}
	mods := make([]*module, len(r.Modules))
	for i, m := range r.Modules {
		mod := s.module(m)
		mods[i] = mod
		out := Module{Module: m, Status: mod.status, Notes: mod.notes, Mismatches: mod.mismatches}
		if mod.debug != nil {
			out.DebugFile, out.DebugHow = mod.debug.path, mod.how
		}
		res.Modules = append(res.Modules, out)
	}
	// The units the report's PCs are in, read at once.
	addrs := make([][]uint64, len(mods))
	for _, t := range r.Threads {
		for _, f := range t.Frames {
			if f.Module >= 0 && f.Module < len(mods) && !f.Withheld && mods[f.Module].dwarf != nil {
				addrs[f.Module] = append(addrs[f.Module], FileAddr(r.Arch, r.Modules[f.Module], f))
			}
		}
	}
	for i, mod := range mods {
		if len(addrs[i]) > 0 {
			mod.dwarf.prepare(addrs[i])
		}
	}
	for _, t := range r.Threads {
		th := Thread{Thread: t, Frames: make([]Frame, 0, len(t.Frames))}
		for i, f := range t.Frames {
			// A signal trampoline's PC is where the handler returns
			// to, but nothing called it: look it up as is (gdb does).
			if !f.Exact && i+1 < len(t.Frames) && t.Frames[i+1].Method == "signal" {
				f.Exact = true
			}
			out := s.frame(r, mods, f)
			out.Frame = t.Frames[i]
			th.Frames = append(th.Frames, out)
		}
		res.Threads = append(res.Threads, th)
	}
	// Symbol tables are read when a frame needs them: say which were.
	for i, mod := range mods {
		if mod.syms != nil {
			res.Modules[i].Symbols = mod.syms.source
		}
	}
	return res
}

// symbols returns the module's symbol tables, reading them on first use:
// with DWARF, most reports never need them.
func (mod *module) symbols() *symtab {
	if mod.syms == nil {
		mod.syms = collectSymbols(mod.files...)
	}
	return mod.syms
}

// FileAddr is the address to look up for a frame of a report of arch: the
// PC in the file's address space, minus 1 for return addresses. On 32-bit
// ARM bit 0 only says Thumb state (reports clear it; a PC that still has
// it is cleared first), and a return address minus 1 is inside the call
// in either state. (Symbolize also looks up signal trampolines, the
// frames just inside a "signal" frame, as is.)
func FileAddr(arch string, m report.Module, f report.Frame) uint64 {
	a := m.FileAddr(f.PC)
	if arch == "arm" {
		a &^= 1
	}
	if !f.Exact && a > 0 {
		a--
	}
	return a
}

func (s *Symbolizer) frame(r *report.Report, mods []*module, f report.Frame) Frame {
	out := Frame{Frame: f}
	if f.Withheld {
		out.Error = "pc withheld by the handler: not in an executable mapping"
		return out
	}
	if f.Module < 0 || f.Module >= len(r.Modules) {
		out.Error = "pc outside every module"
		return out
	}
	m, mod := r.Modules[f.Module], mods[f.Module]
	a := FileAddr(r.Arch, m, f)
	h := report.Hex(a)
	out.Addr = &h
	if mod.status != "" {
		out.Error = mod.status
		return out
	}
	out.Locations = mod.lookup(a)
	if len(out.Locations) == 0 {
		out.Error = fmt.Sprintf("no symbol for %s+%#x", m.Path, a)
		if mod.dwarf == nil {
			out.Error += fmt.Sprintf(", no debug info for build-id %s", short(m.BuildID))
		}
	}
	if mod.dwarf == nil && len(mod.mismatches) > 0 {
		// A debug file was there but is not this build's: say so on
		// every frame it would have given lines to.
		if out.Error == "" {
			out.Error = "no lines"
		}
		out.Error += "; mismatch: " + strings.Join(mod.mismatches, "; ")
	}
	return out
}

// lookup resolves one file address.
func (mod *module) lookup(addr uint64) (locs []Location) {
	defer func() {
		if p := recover(); p != nil {
			locs = nil
		}
	}()
	if ix := mod.dwarf; ix != nil {
		u, row, hasLine, chain := ix.find(addr)
		if len(chain) > 0 {
			file, line, col := "", 0, 0
			if hasLine {
				file, line, col = ix.file(row.file), int(row.line), int(row.col)
			}
			for _, si := range chain {
				sc := &u.scopes[si]
				name, linkage := ix.name(sc.origin)
				l := Location{File: file, Line: line, Column: col, Inlined: sc.parent >= 0, Source: "dwarf"}
				if linkage == "" && sc.parent < 0 && sc.mangled {
					// Like addr2line: a C++ or Rust function without a
					// linkage name in DWARF (static functions) takes the
					// name of the symbol at its entry: thrower(int).
					if sym, ok := mod.symbols().lookup(addr); ok && sym.addr == sc.low() {
						linkage = sym.name
					}
				}
				l.Function, l.Mangled = demangled(name, linkage)
				locs = append(locs, l)
				file, line, col = ix.file(sc.callFile), int(sc.callLine), int(sc.callCol)
			}
			if locs[len(locs)-1].Function == "" {
				if sym, ok := mod.symbols().lookup(addr); ok {
					locs[len(locs)-1].Function, locs[len(locs)-1].Mangled = demangled("", sym.name)
				}
			}
			return locs
		}
		if hasLine {
			// Code with lines but no function DIE (assembly): name it
			// from the symbol table.
			l := Location{File: ix.file(row.file), Line: int(row.line), Column: int(row.col), Source: "dwarf"}
			if sym, ok := mod.symbols().lookup(addr); ok {
				l.Function, l.Mangled = demangled("", sym.name)
			}
			return []Location{l}
		}
	}
	if sym, ok := mod.symbols().lookup(addr); ok {
		off := report.Hex(addr - sym.addr)
		l := Location{Offset: &off, Source: mod.syms.source}
		l.Function, l.Mangled = demangled("", sym.name)
		return []Location{l}
	}
	return nil
}

// demangled returns the name to show and the linkage name when it differs.
// C++ (_Z) and Rust (_R, legacy _ZN…17h…E) names are demangled with their
// parameters, as addr2line -C prints them.
func demangled(name, linkage string) (string, string) {
	if linkage == "" {
		return name, ""
	}
	if d, err := demangle.ToString(linkage); err == nil {
		return d, linkage
	}
	return linkage, ""
}
