package symbolize

import (
	"bytes"
	"crypto/sha256"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"

	"github.com/ulikunitz/xz"

	uelf "github.com/unwound-dev/unwound/elf"
)

// Limits on what outside files may make us allocate.
const (
	maxSection   = 256 << 20 // one section read whole
	maxDebugData = 256 << 20 // decompressed .gnu_debugdata
)

// elfFile is one opened ELF file (binary or separate debug file) and what
// the symbolizer needs of it. Everything is read through bounded reads.
type elfFile struct {
	path string
	f    *os.File // nil for in-memory files
	ef   *elf.File
	ra   io.ReaderAt // the file's bytes

	buildID   []byte // NT_GNU_BUILD_ID
	codeID    string // see codeID
	link      string // .gnu_debuglink name
	linkCRC   uint32
	hasLink   bool
	hasDWARF  bool
	debugData []byte // .gnu_debugdata (xz), MiniDebugInfo
}

// openELF opens and parses path.
func openELF(path string) (*elfFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	e, err := parseELF(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	e.path, e.f = path, f
	return e, nil
}

func (e *elfFile) Close() error {
	if e.f != nil {
		return e.f.Close()
	}
	return nil
}

// parseELF reads an ELF file's identity, debug link and the presence of
// DWARF and MiniDebugInfo. debug/elf may panic on hostile input: a panic
// is an error here.
func parseELF(r io.ReaderAt) (e *elfFile, err error) {
	defer func() {
		if p := recover(); p != nil {
			e, err = nil, fmt.Errorf("malformed ELF: %v", p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	e = &elfFile{ef: ef, ra: r}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_NOTE && e.buildID == nil && p.Filesz <= maxSection {
			e.buildID = noteBuildID(p.Open(), p.Filesz, ef.ByteOrder)
		}
	}
	for _, s := range ef.Sections {
		switch {
		case s.Type == elf.SHT_NOTE && e.buildID == nil && s.Size <= maxSection:
			e.buildID = noteBuildID(s.Open(), s.Size, ef.ByteOrder)
		case s.Name == ".gnu_debuglink" && s.Type != elf.SHT_NOBITS:
			if b, err := sectionBytes(s); err == nil {
				e.link, e.linkCRC, e.hasLink = parseDebuglink(b, ef.ByteOrder)
			}
		case s.Name == ".gnu_debugdata" && s.Type != elf.SHT_NOBITS:
			if b, err := sectionBytes(s); err == nil {
				e.debugData = b
			}
		case (s.Name == ".debug_info" || s.Name == ".zdebug_info") && s.Type != elf.SHT_NOBITS && s.Size > 0:
			e.hasDWARF = true
		}
	}
	e.codeID, _ = codeID(ef, r)
	return e, nil
}

func sectionBytes(s *elf.Section) ([]byte, error) {
	if s.Size > maxSection {
		return nil, fmt.Errorf("section %s: %d bytes", s.Name, s.Size)
	}
	return s.Data()
}

// noteBuildID returns the NT_GNU_BUILD_ID descriptor in a note area,
// parsed by the handler's reader so both ends agree on what an ID is.
func noteBuildID(r io.Reader, size uint64, order binary.ByteOrder) []byte {
	b, err := io.ReadAll(io.LimitReader(r, int64(size)))
	if err != nil {
		return nil
	}
	return uelf.NoteBuildID(b, order)
}

// parseDebuglink decodes .gnu_debuglink: a NUL-terminated file name, padding
// to 4 bytes, then the CRC32 of the debug file.
func parseDebuglink(b []byte, order binary.ByteOrder) (name string, crc uint32, ok bool) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, false
	}
	off := (i + 4) &^ 3
	if off+4 > len(b) {
		return "", 0, false
	}
	name = string(b[:i])
	if bytes.ContainsAny([]byte(name), "/\x00") || name == "." || name == ".." {
		return "", 0, false // a bare file name, never a path
	}
	return name, order.Uint32(b[off:]), true
}

// fileCRC is the CRC32 (IEEE, as gdb's gnu_debuglink_crc32) of a file.
func fileCRC(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, f); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

// codeID is handler/module's CodeID: the first 16 bytes, hex, of the
// SHA-256 of the first page of the first executable PT_LOAD's file bytes.
func codeID(ef *elf.File, r io.ReaderAt) (string, error) {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		n := p.Filesz
		if n > 4096 {
			n = 4096
		}
		b := make([]byte, n)
		if _, err := r.ReadAt(b, int64(p.Off)); err != nil {
			return "", err
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:16]), nil
	}
	return "", errors.New("no executable segment")
}

// symbol is one function symbol.
type symbol struct {
	addr, size uint64
	name       string
}

// symtab is a sorted symbol table.
type symtab struct {
	syms   []symbol
	source string // which tables it came from
}

// collectSymbols reads function symbols from .symtab, MiniDebugInfo and
// .dynsym of the given files; earlier tables win for a given address.
func collectSymbols(files ...*elfFile) (st *symtab) {
	st = &symtab{}
	seen := map[uint64]bool{}
	var sources []string
	add := func(src string, ef *elf.File, syms []elf.Symbol) {
		n := 0
		for _, s := range syms {
			t := elf.ST_TYPE(s.Info)
			if t != elf.STT_FUNC && t != sttGNUIFunc || s.Section == elf.SHN_UNDEF || s.Value == 0 || s.Name == "" {
				continue
			}
			a := s.Value
			if ef.Machine == elf.EM_ARM {
				a &^= 1 // Thumb bit
			}
			if seen[a] {
				continue
			}
			seen[a] = true
			st.syms = append(st.syms, symbol{a, s.Size, s.Name})
			n++
		}
		if n > 0 {
			sources = append(sources, src)
		}
	}
	for _, e := range files {
		if e == nil {
			continue
		}
		if syms, err := safeSymbols(e.ef.Symbols); err == nil {
			add(".symtab", e.ef, syms)
		}
	}
	for _, e := range files {
		if e == nil || e.debugData == nil {
			continue
		}
		if mini, err := miniDebugInfo(e.debugData); err == nil {
			if syms, err := safeSymbols(mini.Symbols); err == nil {
				add(".gnu_debugdata", mini, syms)
			}
		}
	}
	for _, e := range files {
		if e == nil {
			continue
		}
		if syms, err := safeSymbols(e.ef.DynamicSymbols); err == nil {
			add(".dynsym", e.ef, syms)
		}
	}
	sort.SliceStable(st.syms, func(i, j int) bool { return st.syms[i].addr < st.syms[j].addr })
	for i, s := range sources {
		if i > 0 {
			st.source += "+"
		}
		st.source += s
	}
	return st
}

func safeSymbols(fn func() ([]elf.Symbol, error)) (syms []elf.Symbol, err error) {
	defer func() {
		if p := recover(); p != nil {
			syms, err = nil, fmt.Errorf("malformed symbol table: %v", p)
		}
	}()
	return fn()
}

// miniDebugInfo decompresses a .gnu_debugdata section: an xz stream holding
// an ELF file with a .symtab (gdb's MiniDebugInfo).
func miniDebugInfo(data []byte) (*elf.File, error) {
	xr, err := xz.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(xr, maxDebugData+1))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	if len(b) > maxDebugData {
		return nil, errors.New(".gnu_debugdata: too large")
	}
	ef, err := safeNewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf(".gnu_debugdata: %w", err)
	}
	return ef, nil
}

func safeNewFile(r io.ReaderAt) (ef *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			ef, err = nil, fmt.Errorf("malformed ELF: %v", p)
		}
	}()
	return elf.NewFile(r)
}

// lookup returns the symbol holding addr, and addr's offset in it. A symbol
// with a size never covers addresses past its end (gdb's rule), so a static
// function missing from .dynsym is not blamed on its exported neighbour.
func (st *symtab) lookup(addr uint64) (symbol, bool) {
	if st == nil {
		return symbol{}, false
	}
	i := sort.Search(len(st.syms), func(i int) bool { return st.syms[i].addr > addr }) - 1
	for k := 0; i >= 0 && k < 16; i, k = i-1, k+1 {
		s := st.syms[i]
		if s.size == 0 && k == 0 || addr-s.addr < s.size {
			return s, true
		}
	}
	return symbol{}, false
}

// dwarfData opens an ELF file's DWARF, panics turned into errors.
func dwarfData(ef *elf.File) (d *dwarf.Data, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = nil, fmt.Errorf("malformed DWARF: %v", p)
		}
	}()
	return ef.DWARF()
}

// STT_GNU_IFUNC (elf.STT_GNU_IFUNC is Go 1.23+).
const sttGNUIFunc = elf.SymType(10)

// FileInfo is what a symbol store needs to know of an ELF file.
type FileInfo struct {
	BuildID   string // GNU build ID, lower-case hex; "" when none
	HasDWARF  bool   // .debug_info with contents
	HasCode   bool   // an executable segment with file bytes (not a .debug file)
	Debuglink string // .gnu_debuglink file name, "" when none
	LinkCRC   uint32 // and the CRC32 it wants
	// Relocatable: an object file (ET_REL: a .o, a kernel module).
	Relocatable bool
}

// Inspect reads an ELF file's identity with the symbolizer's own bounded
// parser.
func Inspect(path string) (FileInfo, error) {
	e, err := openELF(path)
	if err != nil {
		return FileInfo{}, err
	}
	defer e.Close()
	fi := FileInfo{HasDWARF: e.hasDWARF, Relocatable: e.ef.Type == elf.ET_REL}
	if e.buildID != nil {
		fi.BuildID = hex.EncodeToString(e.buildID)
	}
	if e.hasLink {
		fi.Debuglink, fi.LinkCRC = e.link, e.linkCRC
	}
	for _, s := range e.ef.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Type == elf.SHT_PROGBITS && s.Size > 0 {
			fi.HasCode = true
		}
	}
	if len(e.ef.Sections) == 0 {
		for _, p := range e.ef.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz > 0 {
				fi.HasCode = true
			}
		}
	}
	return fi, nil
}

// FileCRC is the .gnu_debuglink CRC32 of a file.
func FileCRC(path string) (uint32, error) { return fileCRC(path) }
