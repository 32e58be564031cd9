// Package minidebuginfo writes MiniDebugInfo (GDB manual "MiniDebugInfo")
// into stripped ELF files: an xz-compressed ELF file in a .gnu_debugdata
// section, holding the FUNC symbols that .dynsym lacks (as Yocto's
// minidebuginfo feature does) and, unlike Yocto's, the .debug_frame entries
// for code that no table loaded at run time (.eh_frame, .ARM.exidx)
// covers. With it the handler unwinds stripped default-flag C on 32-bit
// ARM and RISC-V, whose only CFI is .debug_frame, as gdb does on the
// unstripped file. See docs/minidebuginfo.md.
//
// The work is split as poky splits it: the section selection and symbol
// list are computed here, objcopy (the target's, or any that reads the
// file) and xz do the file surgery and the compression.
package minidebuginfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/unwound-dev/unwound/handler/module"
)

// Options says what to write.
type Options struct {
	Unstripped string // the linker's output, or its --only-keep-debug file
	Stripped   string // the file that ships
	Out        string // where to write the result; "" writes Stripped in place

	// SymbolsOnly makes Yocto's MiniDebugInfo: no .debug_frame.
	SymbolsOnly bool
	// Go also gives Go programs MiniDebugInfo. They are left alone by
	// default: Go's .debug_frame is large, and a Go program's faults
	// rarely reach core_pattern (the runtime exits unless
	// GOTRACEBACK=crash).
	Go bool

	Objcopy string // default $OBJCOPY, else "objcopy"
	XZ      string // default "xz"
}

// Stats says what went in.
type Stats struct {
	Symbols             int // FUNC symbols kept
	FDEs, FDEsKept      int // .debug_frame FDEs in the unstripped file, and kept
	Inner, Compressed   int // bytes of the inner ELF and of .gnu_debugdata
	StrippedSize, After int64
}

// ErrNotApplicable says the file gets no MiniDebugInfo (not an executable
// or shared library, or nothing to add): the caller leaves it as it is.
var ErrNotApplicable = errors.New("no MiniDebugInfo for this file")

// Make writes Stripped, with a .gnu_debugdata section, to Out. A
// .gnu_debugdata already in Stripped (poky's) is replaced.
func Make(o Options) (Stats, error) {
	var st Stats
	if o.Objcopy == "" {
		o.Objcopy = os.Getenv("OBJCOPY")
	}
	if o.Objcopy == "" {
		o.Objcopy = "objcopy"
	}
	if o.XZ == "" {
		o.XZ = "xz"
	}
	if o.Out == "" {
		o.Out = o.Stripped
	}
	full, err := elf.Open(o.Unstripped)
	if err != nil {
		return st, err
	}
	defer full.Close()
	if full.Type != elf.ET_EXEC && full.Type != elf.ET_DYN {
		return st, fmt.Errorf("%s is %v: %w", o.Unstripped, full.Type, ErrNotApplicable)
	}
	if full.Section(".go.buildinfo") != nil && !o.Go {
		return st, fmt.Errorf("%s is a Go program: %w", o.Unstripped, ErrNotApplicable)
	}
	keep, err := KeepSymbols(full, o.Stripped)
	if err != nil {
		return st, err
	}
	st.Symbols = len(keep)

	var frame []byte
	if !o.SymbolsOnly {
		if frame, st.FDEs, st.FDEsKept, err = uncoveredDebugFrame(full, o.Stripped); err != nil {
			return st, err
		}
	}
	if len(keep) == 0 && st.FDEsKept == 0 {
		return st, fmt.Errorf("%s: no symbols or frames to add: %w", o.Unstripped, ErrNotApplicable)
	}

	dir, err := os.MkdirTemp("", "minidebuginfo")
	if err != nil {
		return st, err
	}
	defer os.RemoveAll(dir)
	keepFile := filepath.Join(dir, "keep")
	if err := os.WriteFile(keepFile, []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		return st, err
	}
	// As poky's inject_minidebuginfo: objcopy -S keeps the listed symbols
	// and drops .debug_*; non-allocated PROGBITS, NOTE and NOBITS sections
	// go too. Allocated ones stay as headers (their contents are in the
	// stripped file).
	args := []string{"-S", "--decompress-debug-sections"}
	for _, s := range full.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 && !strings.HasPrefix(s.Name, ".debug_") &&
			(s.Type == elf.SHT_PROGBITS || s.Type == elf.SHT_NOTE || s.Type == elf.SHT_NOBITS) {
			args = append(args, "--remove-section="+s.Name)
		}
	}
	if st.FDEsKept > 0 {
		args = append(args, "--keep-section=.debug_frame")
	}
	// Allocated sections' contents are in the stripped file: start from
	// the --only-keep-debug file, where they are NOBITS, as poky does.
	debug := filepath.Join(dir, "debug")
	if err := run(o.Objcopy, "--only-keep-debug", o.Unstripped, debug); err != nil {
		return st, err
	}
	mini := filepath.Join(dir, "mini")
	args = append(args, "--keep-symbols="+keepFile, debug, mini)
	if err := run(o.Objcopy, args...); err != nil {
		return st, err
	}
	if st.FDEsKept > 0 {
		df := filepath.Join(dir, "debug_frame")
		if err := os.WriteFile(df, frame, 0o644); err != nil {
			return st, err
		}
		if err := run(o.Objcopy, "--update-section", ".debug_frame="+df, mini); err != nil {
			return st, err
		}
	}
	if fi, err := os.Stat(mini); err == nil {
		st.Inner = int(fi.Size())
	}
	// xz at its default preset, as poky; the handler caps the dictionary
	// it allocates at the decompressed size.
	if err := run(o.XZ, "--keep", "--force", mini); err != nil {
		return st, err
	}
	if fi, err := os.Stat(mini + ".xz"); err == nil {
		st.Compressed = int(fi.Size())
	}
	if fi, err := os.Stat(o.Stripped); err == nil {
		st.StrippedSize = fi.Size()
	}
	tmpOut := filepath.Join(dir, "out")
	if err := run(o.Objcopy, "--remove-section=.gnu_debugdata", o.Stripped, tmpOut); err != nil {
		return st, err
	}
	if err := run(o.Objcopy, "--add-section", ".gnu_debugdata="+mini+".xz", tmpOut); err != nil {
		return st, err
	}
	if err := replace(tmpOut, o.Out, o.Stripped); err != nil {
		return st, err
	}
	if fi, err := os.Stat(o.Out); err == nil {
		st.After = fi.Size()
	}
	return st, nil
}

// replace writes src to dst: in place when dst is the file it was made
// from (its inode, hard links and owner stay: a build system's package
// tree links files), else atomically, with that file's mode.
func replace(src, dst, modeFrom string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if dst == modeFrom {
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	mode := os.FileMode(0o755)
	if fi, err := os.Stat(modeFrom); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".minidebuginfo")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// KeepSymbols lists the defined FUNC symbols of the unstripped file that
// the stripped file's .dynsym does not define (what poky keeps).
func KeepSymbols(full *elf.File, stripped string) ([]string, error) {
	dyn := map[string]bool{}
	sf, err := elf.Open(stripped)
	if err != nil {
		return nil, err
	}
	defer sf.Close()
	if syms, err := sf.DynamicSymbols(); err == nil {
		for _, s := range syms {
			if s.Section != elf.SHN_UNDEF {
				dyn[s.Name] = true
			}
		}
	}
	syms, err := full.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, err
	}
	seen := map[string]bool{}
	var keep []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Name == "" || dyn[s.Name] || seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		keep = append(keep, s.Name)
	}
	sort.Strings(keep)
	return keep, nil
}

// uncoveredDebugFrame returns the unstripped file's .debug_frame with only
// the FDEs for code that the stripped file's loaded tables do not cover, as
// the handler reads those tables (handler/module).
func uncoveredDebugFrame(full *elf.File, stripped string) ([]byte, int, int, error) {
	s := full.Section(".debug_frame")
	if s == nil {
		return nil, 0, 0, nil
	}
	df, err := s.Data()
	if err != nil {
		return nil, 0, 0, fmt.Errorf(".debug_frame: %w", err)
	}
	f, err := os.Open(stripped)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	mf, err := module.Load(f)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%s: %w", stripped, err)
	}
	ptr := 8
	if full.Class == elf.ELFCLASS32 {
		ptr = 4
	}
	return FilterDebugFrame(df, ptr, full.ByteOrder, func(lo, hi uint64) bool { return covered(mf, lo, hi) })
}

// covered reports whether a loaded table describes the function at
// [lo, hi): an .eh_frame FDE holding both ends, or an .ARM.exidx entry of
// its own (one starting at lo: entries run to the next one, so an earlier
// entry covers lo without describing it) that is not CANTUNWIND.
func covered(f *module.File, lo, hi uint64) bool {
	if hi <= lo {
		return true
	}
	if f.EHFrame != nil {
		_, e1 := f.EHFrame.Lookup(lo)
		_, e2 := f.EHFrame.Lookup(hi - 1)
		if e1 == nil && e2 == nil {
			return true
		}
	}
	if f.EHABI != nil {
		if e, err := f.EHABI.Lookup(lo); err == nil && e != nil && e.Start == lo&^1 {
			return true
		}
	}
	return false
}

// FilterDebugFrame keeps the CIEs and the FDEs of .debug_frame (DWARF 5
// §6.4.1) whose range covered does not claim, renumbering the FDEs' CIE
// pointers (section offsets in .debug_frame). It returns the new section,
// how many FDEs there were and how many were kept.
func FilterDebugFrame(df []byte, ptrSize int, order binary.ByteOrder, covered func(lo, hi uint64) bool) ([]byte, int, int, error) {
	type entry struct {
		off, end uint64
		cie      bool
		cieOff   uint64 // FDE: its CIE's offset
		dwarf64  bool
	}
	var ents []entry
	for off := uint64(0); off < uint64(len(df)); {
		if uint64(len(df))-off < 4 {
			return nil, 0, 0, fmt.Errorf(".debug_frame: entry at %#x truncated", off)
		}
		l := uint64(order.Uint32(df[off:]))
		hdr, d64 := uint64(4), false
		if l == 0xffffffff {
			if uint64(len(df))-off < 12 {
				return nil, 0, 0, fmt.Errorf(".debug_frame: entry at %#x truncated", off)
			}
			l, hdr, d64 = order.Uint64(df[off+4:]), 12, true
		}
		if l == 0 { // a terminator or padding
			off += hdr
			continue
		}
		idSize := uint64(4)
		if d64 {
			idSize = 8
		}
		if l < idSize || l > uint64(len(df))-off-hdr {
			return nil, 0, 0, fmt.Errorf(".debug_frame: entry at %#x: length %d runs past the section", off, l)
		}
		end := off + hdr + l
		var id uint64
		if d64 {
			id = order.Uint64(df[off+hdr:])
		} else {
			id = uint64(order.Uint32(df[off+hdr:]))
		}
		e := entry{off: off, end: end, dwarf64: d64}
		if (d64 && id == ^uint64(0)) || (!d64 && id == 0xffffffff) {
			e.cie = true
		} else {
			e.cieOff = id
		}
		ents = append(ents, e)
		off = end
	}
	var out []byte
	newOff := map[uint64]uint64{}
	nFDE, kept := 0, 0
	// CIEs first, in order, so that every kept FDE's CIE has an offset.
	for _, e := range ents {
		if e.cie {
			newOff[e.off] = uint64(len(out))
			out = append(out, df[e.off:e.end]...)
		}
	}
	for _, e := range ents {
		if e.cie {
			continue
		}
		nFDE++
		hdr := uint64(4)
		idSize := uint64(4)
		if e.dwarf64 {
			hdr, idSize = 12, 8
		}
		body := e.off + hdr + idSize
		if e.end-body < uint64(2*ptrSize) {
			return nil, 0, 0, fmt.Errorf(".debug_frame: FDE at %#x too short", e.off)
		}
		var lo, n uint64
		if ptrSize == 4 {
			lo, n = uint64(order.Uint32(df[body:])), uint64(order.Uint32(df[body+4:]))
		} else {
			lo, n = order.Uint64(df[body:]), order.Uint64(df[body+8:])
		}
		if covered(lo, lo+n) {
			continue
		}
		c, ok := newOff[e.cieOff]
		if !ok {
			return nil, 0, 0, fmt.Errorf(".debug_frame: FDE at %#x: no CIE at %#x", e.off, e.cieOff)
		}
		start := len(out)
		out = append(out, df[e.off:e.end]...)
		if e.dwarf64 {
			order.PutUint64(out[start+int(hdr):], c)
		} else {
			order.PutUint32(out[start+int(hdr):], uint32(c))
		}
		kept++
	}
	if kept == 0 {
		return nil, nFDE, 0, nil
	}
	return out, nFDE, kept, nil
}
