package handler

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/internal/regular"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/jsonlite"
)

// OfflineOptions drive --core-file: a core on disk or on stdin, modules
// from a sysroot, the report printed, nothing written anywhere else.
type OfflineOptions struct {
	CoreFile string // path, or "-" for stdin (streamed like the kernel's pipe; a regular file is read as one)
	Exe      string // the main program, for cores without NT_FILE
	Sysroot  string // where NT_FILE paths are looked up; default /
	Config   *config.Config
	Log      *Logger
	Stdin    io.Reader
	// Sources are tried before the sysroot for every module (the
	// install self-test serves its synthetic program from memory).
	Sources []module.Source
	// ConfigErr is what loading Config found wrong: it goes into the
	// report's errors, as in kernel mode.
	ConfigErr error
	// LimitMemory applies handler.memory_limit_mib to the process, as
	// kernel mode does (the command sets it; tests that call Offline in
	// their own process do not).
	LimitMemory bool
}

// Offline builds the report for a core file. A core that cannot be parsed
// still gives a report, marked partial, saying why; the error is for a
// file that cannot be opened.
func Offline(o OfflineOptions) (*report.Report, error) {
	cfg := o.Config
	if cfg == nil {
		cfg = config.Default()
	}
	if o.LimitMemory {
		limitMemory(cfg.Handler.MemoryLimitMiB, false)
	}
	start := time.Now()
	root := &sysroot{dir: o.Sysroot, exe: o.Exe, sources: o.Sources}
	if root.dir == "" {
		root.dir = "/"
	}
	var in *input
	if o.CoreFile == "-" {
		in = streamInput(o.Stdin, root, start.Add(cfg.Handler.Deadline.D()))
	} else {
		f, err := regular.Open(o.CoreFile) // a FIFO: use --core-file - instead
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = fileInput(f, root)
	}
	c := newCrash(&env{cfg: cfg, log: o.Log}, in, start)
	if o.ConfigErr != nil {
		c.out.errs = append(c.out.errs, o.ConfigErr.Error())
	}
	return c.pipeline((*crash).unwindHere), nil
}

// offlineModules finds the modules from NT_FILE under the sysroot, or,
// without NT_FILE, places --exe from the auxiliary vector.
func (c *crash) offlineModules(o *sysroot) error {
	override := map[string]string{}
	entry, hasEntry := c.img.core.AuxvValue(coredump.AT_ENTRY)
	if len(c.img.core.Files) > 0 {
		c.img.mods = module.Group(fileMaps(c.img.core))
		if i := c.entryModule(); i >= 0 {
			c.proc.exe = module.CleanPath(c.img.mods[i].Path)
			if o.exe != "" {
				override[c.img.mods[i].Path] = o.exe
			}
		}
		c.img.sources = append(append([]module.Source(nil), o.sources...), module.SysrootSource(o.dir, override))
		return nil
	}
	if o.exe == "" {
		return errors.New("the core has no NT_FILE note (a qemu-user core?): name the program with --exe")
	}
	if !hasEntry {
		return errors.New("the core has neither NT_FILE nor AT_ENTRY: cannot place --exe")
	}
	ef, err := elf.Open(o.exe)
	if err != nil {
		return fmt.Errorf("--exe: %w", err)
	}
	defer ef.Close()
	// The load bias puts the program's entry point at AT_ENTRY (zero for
	// a static non-PIE program).
	abs, _ := filepath.Abs(o.exe)
	m, err := place(ef, abs, entry-ef.Entry)
	if err != nil {
		return err
	}
	c.img.mods = []*module.Module{m}
	c.proc.exe = m.Path
	c.img.sources = []module.Source{module.SysrootSource(o.dir, map[string]string{m.Path: o.exe})}
	libs, err := c.linkMap(ef, entry-ef.Entry, o.dir)
	if err != nil {
		c.errorf("shared libraries: %v", err)
	}
	c.img.mods = append(c.img.mods, libs...)
	sort.Slice(c.img.mods, func(i, j int) bool { return c.img.mods[i].Start < c.img.mods[j].Start })
	return nil
}

// linkMap finds the shared libraries of a core without NT_FILE the way
// gdb does: the program's DT_DEBUG entry points at the dynamic linker's
// r_debug, whose r_map chains one link_map {l_addr, l_name, l_ld, l_next,
// l_prev} per loaded object (glibc's <link.h>; musl's is the same).
func (c *crash) linkMap(ef *elf.File, bias uint64, sysroot string) ([]*module.Module, error) {
	var dyn, interp *elf.Prog
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_DYNAMIC:
			dyn = p
		case elf.PT_INTERP:
			interp = p
		}
	}
	if dyn == nil {
		return nil, nil // static: nothing else is loaded
	}
	ps := uint64(c.img.arch.PtrSize)
	read := func(addr uint64) (uint64, error) { return c.img.arch.ReadPtr(c.img.mem, addr) }
	var rdebug uint64
	for i := uint64(0); i < dyn.Memsz/(2*ps) && i < 1024; i++ {
		tag, err := read(dyn.Vaddr + bias + 2*ps*i)
		if err != nil {
			return nil, fmt.Errorf("reading _DYNAMIC: %w", err)
		}
		if tag == uint64(elf.DT_NULL) {
			break
		}
		if tag == uint64(elf.DT_DEBUG) {
			if rdebug, err = read(dyn.Vaddr + bias + 2*ps*i + ps); err != nil {
				return nil, err
			}
		}
	}
	if rdebug == 0 {
		return nil, fmt.Errorf("no DT_DEBUG in the program's dynamic section")
	}
	lm, err := read(rdebug + ps) // r_map, after the int r_version padded to a word
	if err != nil {
		return nil, fmt.Errorf("reading r_debug: %w", err)
	}
	var mods []*module.Module
	seen := map[uint64]bool{}
	for n := 0; lm != 0 && !seen[lm] && n < 1024; n++ {
		seen[lm] = true
		laddr, err1 := read(lm)
		lname, err2 := read(lm + ps)
		next, err3 := read(lm + 3*ps)
		if err := errors.Join(err1, err2, err3); err != nil {
			return mods, fmt.Errorf("link_map at %#x: %w", lm, err)
		}
		lm = next
		name := readCString(c.img.mem, lname, 4096)
		if name == "" && interp != nil && lname == interp.Vaddr+bias {
			// musl names itself by the program's PT_INTERP string, in a
			// read-only page of the program that qemu-user cores leave
			// out: the file has it.
			name = interpPath(interp)
		}
		// The first entry is the program itself: glibc names it "", musl
		// by the path it was run as.
		if n == 0 || name == "" || !strings.HasPrefix(name, "/") {
			continue // the program itself, the vDSO
		}
		lf, err := elf.Open(filepath.Join(sysroot, name))
		if err != nil {
			c.errorf("%s: %v", name, err)
			continue
		}
		m, err := place(lf, name, laddr)
		lf.Close()
		if err != nil {
			c.errorf("%s: %v", name, err)
			continue
		}
		mods = append(mods, m)
	}
	return mods, nil
}

// interpPath reads the program interpreter's path from its PT_INTERP
// segment, "" when it cannot.
func interpPath(p *elf.Prog) string {
	b, err := p.Data()
	if err != nil || len(b) > 4096 {
		return ""
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func readCString(mem io.ReaderAt, addr uint64, max int) string {
	var out []byte
	var b [64]byte
	for len(out) < max {
		n := len(b)
		if _, err := mem.ReadAt(b[:n], int64(addr)+int64(len(out))); err != nil {
			// Near the end of a mapping: byte by byte.
			if _, err := mem.ReadAt(b[:1], int64(addr)+int64(len(out))); err != nil {
				return ""
			}
			n = 1
		}
		if i := bytes.IndexByte(b[:n], 0); i >= 0 {
			return string(append(out, b[:i]...))
		}
		out = append(out, b[:n]...)
	}
	return ""
}

// place maps an ELF file's PT_LOAD segments at a load bias.
func place(ef *elf.File, path string, bias uint64) (*module.Module, error) {
	m := &module.Module{Path: path}
	const page = 0xfff
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Memsz == 0 {
			continue
		}
		mp := module.Mapping{
			Start:  (p.Vaddr + bias) &^ page,
			End:    (p.Vaddr + bias + p.Memsz + page) &^ page,
			Offset: p.Off &^ page,
			Path:   path,
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
		return nil, fmt.Errorf("%s: no PT_LOAD segment", path)
	}
	m.RuntimeOffset = m.Maps[0].Start - m.Maps[0].Offset
	return m, nil
}

// PrintJSON writes a report as JSON on one line, as it is stored (the
// handler leaves pretty-printing to jq and the host's `unwound decode`, to
// keep an indenter out of the board binary).
func PrintJSON(w io.Writer, r *report.Report) error {
	b, err := jsonlite.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
