package symbolize

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/unwound-dev/unwound/report"
)

// candidate is one place a module's symbols may be.
type candidate struct {
	path string
	how  string // build-id, debug-dir, .debug, debuglink, binary
}

// under joins root and an absolute device path without letting ".." climb
// out of root: the path comes from a report, outside input.
func under(root, p string) string {
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, filepath.FromSlash(path.Clean("/"+p)))
}

// modulePath is a report module's path as a file: " (deleted)" removed.
func modulePath(m report.Module) string {
	return strings.TrimSuffix(m.Path, " (deleted)")
}

// buildIDCandidates are the separate debug files gdb would try before it
// reads the binary: the build-id tree, then the path-mirroring layouts.
func (s *Symbolizer) buildIDCandidates(m report.Module) []candidate {
	var out []candidate
	p := modulePath(m)
	if m.BuildIDKind != "code" && len(m.BuildID) > 2 {
		if _, err := hex.DecodeString(m.BuildID); err == nil {
			id := strings.ToLower(m.BuildID)
			for _, d := range s.opts.DebugDirs {
				out = append(out, candidate{filepath.Join(d, ".build-id", id[:2], id[2:]+".debug"), "build-id"})
			}
			// The same tree's unstripped binaries, without the suffix
			// (gdb reads .build-id/xx/rest for the executable; a
			// symbol store keeps whichever file it was given).
			for _, d := range s.opts.DebugDirs {
				out = append(out, candidate{filepath.Join(d, ".build-id", id[:2], id[2:]), "build-id"})
			}
		}
	}
	if !strings.HasPrefix(p, "/") {
		return out
	}
	for _, d := range s.opts.DebugDirs {
		out = append(out, candidate{under(d, p+".debug"), "debug-dir"})
	}
	dir, base := path.Split(p)
	roots := append([]string{s.sysroot()}, s.opts.DebugDirs...)
	for _, r := range roots {
		out = append(out,
			candidate{under(r, path.Join(dir, ".debug", base+".debug")), ".debug"},
			candidate{under(r, path.Join(dir, ".debug", base)), ".debug"})
	}
	return out
}

// linkCandidates are the places gdb looks for a .gnu_debuglink name.
func (s *Symbolizer) linkCandidates(m report.Module, link string) []candidate {
	p := modulePath(m)
	dir := path.Dir(p)
	out := []candidate{
		{under(s.sysroot(), path.Join(dir, link)), "debuglink"},
		{under(s.sysroot(), path.Join(dir, ".debug", link)), "debuglink"},
	}
	for _, d := range s.opts.DebugDirs {
		out = append(out, candidate{under(d, path.Join(dir, link)), "debuglink"})
	}
	return out
}

func (s *Symbolizer) sysroot() string {
	if s.opts.Sysroot == "" {
		return "/"
	}
	return s.opts.Sysroot
}

// verify checks that e is the file the report's module names.
func verify(m report.Module, e *elfFile) error {
	switch {
	case m.BuildID == "":
		return nil // nothing to check against: see Module.Unverified
	case m.BuildIDKind == "code":
		if e.codeID == "" {
			return errors.New("no executable segment bytes to check the code id")
		}
		if !strings.EqualFold(e.codeID, m.BuildID) {
			return fmt.Errorf("code id %s, report has %s", e.codeID, m.BuildID)
		}
	default:
		if e.buildID == nil {
			return errors.New("no build id")
		}
		if got := hex.EncodeToString(e.buildID); !strings.EqualFold(got, m.BuildID) {
			return fmt.Errorf("build-id %s, report has %s", got, m.BuildID)
		}
	}
	return nil
}

// load finds and opens a module's files. It never fails: what could not be
// found is said in the module's Status.
func (s *Symbolizer) load(m report.Module) *module {
	mod := &module{}
	p := modulePath(m)
	vdso := p == "[vdso]" && m.BuildIDKind != "code" && m.BuildID != ""
	if (p == "" || strings.HasPrefix(p, "[")) && !vdso {
		mod.status = fmt.Sprintf("no file for %s", m.Path)
		return mod
	}
	// The vDSO has no file, but its build ID finds the kernel build's
	// vdso.so.dbg in a build-id tree (a symbol store) or on debuginfod.
	var mismatches []string
	try := func(c candidate) *elfFile {
		if _, err := os.Stat(c.path); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				mismatches = append(mismatches, err.Error())
			}
			return nil
		}
		e, err := openELF(c.path)
		if err != nil {
			mismatches = append(mismatches, err.Error())
			return nil
		}
		if err := verify(m, e); err != nil {
			mismatches = append(mismatches, fmt.Sprintf("%s: %v", c.path, err))
			e.Close()
			return nil
		}
		return e
	}
	keep := func(e *elfFile, how string) {
		mod.files = append(mod.files, e)
		if e.hasDWARF && mod.debug == nil {
			mod.debug, mod.how = e, how
		}
	}
	for _, c := range s.buildIDCandidates(m) {
		if e := try(c); e != nil {
			keep(e, c.how)
			if e.hasDWARF {
				break
			}
		}
	}
	var bin *elfFile
	if !vdso {
		bin = try(candidate{under(s.sysroot(), p), "binary"})
	}
	if bin != nil && mod.debug == nil && bin.hasLink {
		for _, c := range s.linkCandidates(m, bin.link) {
			if _, err := os.Stat(c.path); err != nil || c.path == bin.path {
				continue
			}
			crc, err := fileCRC(c.path)
			if err != nil {
				continue
			}
			if crc != bin.linkCRC {
				mismatches = append(mismatches, fmt.Sprintf("%s: debuglink CRC %08x, binary wants %08x", c.path, crc, bin.linkCRC))
				continue
			}
			e, err := openELF(c.path)
			if err != nil {
				mismatches = append(mismatches, err.Error())
				continue
			}
			// A CRC match with a verified binary identifies the file;
			// a GNU build ID, when both have one, must agree too.
			if e.buildID != nil && bin.buildID != nil && string(e.buildID) != string(bin.buildID) {
				mismatches = append(mismatches, fmt.Sprintf("%s: build-id %x, binary has %x", c.path, e.buildID, bin.buildID))
				e.Close()
				continue
			}
			keep(e, c.how)
			break
		}
	}
	// Last, as gdb does: a debuginfod server, by GNU build ID (even when
	// the binary itself is not in the sysroot).
	if d := s.opts.Debuginfod; d != nil && mod.debug == nil && m.BuildIDKind != "code" && m.BuildID != "" {
		path, from, err := d.fetch(strings.ToLower(m.BuildID))
		switch {
		case err != nil:
			mod.notes = append(mod.notes, err.Error())
		case path != "":
			before := len(mismatches)
			if e := try(candidate{path, "debuginfod"}); e != nil {
				keep(e, "debuginfod")
				if from != "" {
					mod.notes = append(mod.notes, "debug file fetched from "+from)
				}
			} else if len(mismatches) > before {
				// Not this build: never serve it from the cache again.
				os.Remove(path)
			}
		}
	}
	if bin != nil {
		mod.binary = bin
		keep(bin, "binary")
	}
	if len(mod.files) == 0 {
		mod.status = s.noInfo(m, mismatches)
		return mod
	}
	if m.BuildID == "" {
		mod.notes = append(mod.notes, "unverified: the report has no build id")
	}
	if mod.debug != nil {
		ix, err := openIndex(mod.debug, s.opts.IndexDir)
		if err != nil {
			mod.notes = append(mod.notes, fmt.Sprintf("%s: %v", mod.debug.path, err))
		}
		mod.dwarf = ix
	}
	if mod.dwarf == nil && len(mod.symbols().syms) == 0 {
		mod.status = s.noInfo(m, mismatches)
		if bin != nil {
			mod.status = fmt.Sprintf("no debug info for %s build-id %s, stripped", m.Path, short(m.BuildID))
			if len(mismatches) > 0 {
				mod.status += "; mismatch: " + strings.Join(mismatches, "; ")
			}
		}
	}
	mod.mismatches = mismatches
	return mod
}

func (s *Symbolizer) noInfo(m report.Module, mismatches []string) string {
	id := short(m.BuildID)
	if id == "" {
		id = "none"
	}
	msg := fmt.Sprintf("no debug info for %s build-id %s", m.Path, id)
	if len(mismatches) > 0 {
		msg += "; mismatch: " + strings.Join(mismatches, "; ")
	}
	return msg
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12] + "…"
	}
	return id
}
