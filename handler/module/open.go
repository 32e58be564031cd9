package module

import (
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// Source gives the bytes of a module's file. Sources are tried in order.
type Source func(m *Module) (io.ReaderAt, io.Closer, error)

// ProcSources opens files the way the crashed process saw them:
// /proc/<pid>/map_files/<range> survives deleted and replaced files and
// resolves in the process's mount namespace; the path under
// /proc/<pid>/root, resolved inside that root (root.go), is the fallback
// where map_files is not readable.
func ProcSources(pid int) []Source {
	return []Source{
		func(m *Module) (io.ReaderAt, io.Closer, error) {
			mp := m.Maps[0]
			return openFile(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, mp.Start, mp.End))
		},
		func(m *Module) (io.ReaderAt, io.Closer, error) {
			return openInRoot(fmt.Sprintf("/proc/%d/root", pid), CleanPath(m.Path))
		},
	}
}

// SysrootSource opens files under a sysroot, for offline cores, resolving
// symlinks inside it first (a rootfs's absolute links point into the
// rootfs). When that finds nothing, the path is opened under the sysroot as
// the host resolves it, as gdb's sysroot does (a developer's sysroot may
// link to host directories); a path that climbs out of the sysroot never
// is. An override maps a module path to a file, e.g. --exe for the main
// program.
func SysrootSource(sysroot string, override map[string]string) Source {
	return func(m *Module) (io.ReaderAt, io.Closer, error) {
		if p, ok := override[m.Path]; ok {
			return openFile(p)
		}
		r, c, err := openInRoot(sysroot, CleanPath(m.Path))
		if err == nil {
			return r, c, nil
		}
		root := filepath.Clean(sysroot)
		p := filepath.Join(root, CleanPath(m.Path))
		if p != root && !strings.HasPrefix(p, root+string(filepath.Separator)) && root != string(filepath.Separator) {
			return nil, nil, err
		}
		if r, c, err2 := openFile(p); err2 == nil {
			return r, c, nil
		}
		return nil, nil, err
	}
}

// CleanPath drops the kernel's " (deleted)" suffix.
func CleanPath(p string) string { return strings.TrimSuffix(p, " (deleted)") }

// Load opens the module's file from the first source that has it, reads
// its identity and tables, and places it in the address space. Failures are
// kept in m.Err for the report; the module stays usable for PC ranges.
func (m *Module) Load(sources []Source) io.Closer {
	var errs []string
	for _, src := range sources {
		r, c, err := src(m)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if err := m.LoadFrom(r); err != nil {
			c.Close()
			errs = append(errs, err.Error())
			continue
		}
		return c
	}
	if m.Err == nil {
		m.Err = fmt.Errorf("cannot open: %s", strings.Join(errs, "; "))
	}
	return nil
}

// LoadFrom reads the module from r: a file, or the process's memory for
// the vDSO.
func (m *Module) LoadFrom(r io.ReaderAt) error {
	f, err := Load(r)
	if err != nil {
		m.Err = fmt.Errorf("%s: %w", m.Path, err)
		return m.Err
	}
	if err := m.placeFile(f); err != nil {
		m.Err = fmt.Errorf("%s: %w", m.Path, err)
		return m.Err
	}
	m.File, m.Err = f, nil
	if f.BuildID != nil {
		m.BuildID, m.BuildIDKind = hex.EncodeToString(f.BuildID), "gnu"
	} else if id, err := f.CodeID(); err == nil {
		m.BuildID, m.BuildIDKind = id, "code"
	}
	return nil
}
