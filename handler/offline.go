package handler

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/unwound-dev/unwound/handler/arch"
	"github.com/unwound-dev/unwound/handler/config"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/report"
)

// OfflineOptions drive --core-file: a core on disk or on stdin, modules
// from a sysroot, the report printed, nothing written anywhere else.
type OfflineOptions struct {
	CoreFile string // path, or "-" for stdin (read as a stream, like the kernel's pipe)
	Exe      string // the main program, for cores without NT_FILE
	Sysroot  string // where NT_FILE paths are looked up; default /
	Config   *config.Config
	Log      *Logger
	Stdin    io.Reader
}

// Offline builds the report for a core file.
func Offline(o OfflineOptions) (*report.Report, error) {
	cfg := o.Config
	if cfg == nil {
		cfg = config.Default()
	}
	start := time.Now()
	deadline := start.Add(cfg.Handler.Deadline.D())
	c := &crash{cfg: cfg, log: o.Log, start: start, names: map[int]string{}}
	if o.Sysroot == "" {
		o.Sysroot = "/"
	}
	if o.CoreFile == "-" {
		core, stream, err := coredump.ReadHeader(o.Stdin, coredump.DefaultLimits)
		if core == nil {
			return nil, err
		}
		if err != nil {
			c.errorf("reading the core: %v", err)
			c.partial = true
		}
		c.core, c.mode = core, "stream"
		if c.arch, err = arch.ByMachine(core.Machine, core.Class); err != nil {
			return nil, err
		}
		stream.Deadline = deadline
		mem, err := c.collectStream(stream)
		if err != nil {
			c.errorf("core stream: %v", err)
			c.partial = true
		}
		c.mem = mem
	} else {
		f, err := os.Open(o.CoreFile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		core, mem, err := coredump.OpenFile(f, st.Size(), coredump.DefaultLimits)
		if core == nil {
			return nil, err
		}
		if err != nil {
			c.errorf("reading the core: %v", err)
			c.partial = true
		}
		c.core, c.mode, c.mem = core, "file", mem
		if c.arch, err = arch.ByMachine(core.Machine, core.Class); err != nil {
			return nil, err
		}
	}
	if c.core.PRPSInfo != nil {
		c.pid = c.core.PRPSInfo.PID
	}
	c.tid = c.core.Threads[0].TID
	if err := c.offlineModules(o); err != nil {
		c.errorf("%v", err)
	}
	defer c.close()
	c.addVDSO(vdsoSize(c.core))
	c.unwindThreads(deadline)
	return c.report(), nil
}

// offlineModules finds the modules from NT_FILE under the sysroot, or,
// without NT_FILE, places --exe from the auxiliary vector.
func (c *crash) offlineModules(o OfflineOptions) error {
	override := map[string]string{}
	entry, hasEntry := c.core.AuxvValue(9) // AT_ENTRY
	if len(c.core.Files) > 0 {
		c.mods = module.Group(fileMaps(c.core))
		if hasEntry {
			if i := module.Find(c.mods, entry); i >= 0 {
				c.exe = cleanDeleted(c.mods[i].Path)
				if o.Exe != "" {
					override[c.mods[i].Path] = o.Exe
				}
			}
		}
		c.sources = []module.Source{module.SysrootSource(o.Sysroot, override)}
		return nil
	}
	if o.Exe == "" {
		return errors.New("the core has no NT_FILE note (a qemu-user core?): name the program with --exe")
	}
	if !hasEntry {
		return errors.New("the core has neither NT_FILE nor AT_ENTRY: cannot place --exe")
	}
	m, err := placeExe(o.Exe, entry)
	if err != nil {
		return err
	}
	c.mods = []*module.Module{m}
	c.exe = m.Path
	c.sources = []module.Source{module.SysrootSource(o.Sysroot, map[string]string{m.Path: o.Exe})}
	return nil
}

// placeExe maps a program's PT_LOAD segments at the load bias that puts its
// entry point at AT_ENTRY (zero for a static non-PIE program).
func placeExe(path string, entry uint64) (*module.Module, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--exe: %w", err)
	}
	defer ef.Close()
	bias := entry - ef.Entry
	abs, _ := filepath.Abs(path)
	m := &module.Module{Path: abs}
	const page = 0xfff
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Memsz == 0 {
			continue
		}
		mp := module.Mapping{
			Start:  (p.Vaddr + bias) &^ page,
			End:    (p.Vaddr + bias + p.Memsz + page) &^ page,
			Offset: p.Off &^ page,
			Path:   abs,
		}
		if len(m.Maps) == 0 || mp.Start < m.Start {
			m.Start = mp.Start
		}
		if mp.End > m.End {
			m.End = mp.End
		}
		m.Maps = append(m.Maps, mp)
	}
	if len(m.Maps) == 0 {
		return nil, fmt.Errorf("--exe %s: no PT_LOAD segment", path)
	}
	m.RuntimeOffset = m.Maps[0].Start - m.Maps[0].Offset
	return m, nil
}

// PrintJSON writes a report as indented JSON.
func PrintJSON(w io.Writer, r *report.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
