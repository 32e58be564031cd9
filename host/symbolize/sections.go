package symbolize

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// The DWARF sections debug/dwarf reads, by the name after ".debug_":
// the four of dwarf.New and the DWARF 5 ones of Data.AddSection, and
// .debug_aranges, which we read (units.go). The others (.debug_loclists,
// .debug_frame…) are never read: in a libc6-dbg file .debug_loclists
// alone is a quarter of the bytes.
var (
	dwarfNew   = []string{"abbrev", "info", "line", "ranges", "str"}
	dwarfAdded = []string{"addr", "line_str", "str_offsets", "rnglists"}
)

func dwarfSectionNames() []string {
	var out []string
	out = append(out, dwarfNew...)
	out = append(out, dwarfAdded...)
	return append(out, "aranges")
}

// all, as a length: the whole section.
const all = ^uint64(0)

// openIndex opens e's DWARF index, reading only the sections a
// symbolizer needs, and inflating compressed ones (SHF_COMPRESSED, zlib or
// zstd) with klauspost/compress, which is faster than compress/zlib, and
// only as far as the units asked for (units.go). Relocatable objects and
// GNU .zdebug sections take debug/elf's own path.
func openIndex(e *elfFile, indexDir string) (*dwarfIndex, error) {
	ef := e.ef
	full := func() (*dwarfIndex, error) {
		d, err := dwarfData(ef)
		if err != nil {
			return nil, err
		}
		return newIndex(d)
	}
	if ef.Type == elf.ET_REL || e.ra == nil {
		return full()
	}
	secs := map[string]*elf.Section{}
	compressed := false
	for _, s := range ef.Sections {
		if strings.HasPrefix(s.Name, ".zdebug_") {
			return full()
		}
		if strings.HasPrefix(s.Name, ".debug_") {
			secs[s.Name[len(".debug_"):]] = s
			compressed = compressed || s.Flags&elf.SHF_COMPRESSED != 0
		}
	}
	cache := ""
	if indexDir != "" && compressed && e.buildID != nil {
		cache = filepath.Join(indexDir, indexKey(e.buildID, secs))
	}
	ds := &dwarfSections{sec: map[string]*lazySection{}, order: ef.ByteOrder}
	if cache != "" {
		if dat := readIndex(cache); dat != nil {
			for n, b := range dat {
				ds.sec[n] = &lazySection{buf: b, size: uint64(len(b))}
			}
			cache = "" // nothing to write
		}
	}
	if len(ds.sec) == 0 {
		for _, n := range dwarfSectionNames() {
			s := secs[n]
			if s == nil || s.Type == elf.SHT_NOBITS {
				continue
			}
			l, err := openSection(e.ra, ef, s)
			if err != nil {
				return nil, fmt.Errorf("section %s: %w", s.Name, err)
			}
			ds.sec[n] = l
		}
	}
	if ix := arangesIndex(ds); ix != nil {
		return ix, nil
	}
	d, err := ds.data(all, all, all)
	if err != nil {
		return nil, err
	}
	if cache != "" {
		if dat := ds.complete(); dat != nil {
			writeIndex(cache, dat) // best effort: the next run inflates again
		}
	}
	return newIndex(d)
}

// dwarfSections are a debug file's DWARF sections, by the name after
// ".debug_", inflated as far as asked.
type dwarfSections struct {
	sec   map[string]*lazySection
	order binary.ByteOrder
}

// bytes returns section n's first end bytes (all of it for all), inflated.
func (s *dwarfSections) bytes(n string, end uint64) []byte {
	l := s.sec[n]
	if l == nil {
		return nil
	}
	b := l.upTo(end)
	if uint64(len(b)) > end {
		b = b[:end]
	}
	return b
}

// complete returns every section whole, nil when one failed to inflate.
func (s *dwarfSections) complete() map[string][]byte {
	out := map[string][]byte{}
	for n, l := range s.sec {
		b := l.upTo(all)
		if l.err != nil {
			return nil
		}
		out[n] = b
	}
	return out
}

// data makes a dwarf.Data of the sections, with .debug_info,
// .debug_line and .debug_abbrev cut at infoEnd, lineEnd and abbrevEnd.
func (s *dwarfSections) data(infoEnd, lineEnd, abbrevEnd uint64) (d *dwarf.Data, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = nil, fmt.Errorf("malformed DWARF: %v", p)
		}
	}()
	d, err = dwarf.New(s.bytes("abbrev", abbrevEnd), nil, nil, s.bytes("info", infoEnd), s.bytes("line", lineEnd), nil, s.bytes("ranges", all), s.bytes("str", all))
	if err != nil {
		return nil, err
	}
	for _, n := range dwarfAdded {
		if b := s.bytes(n, all); b != nil {
			if err := d.AddSection(".debug_"+n, b); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// lazySection is a section's bytes, inflated as far as asked: a
// compressed section is one deflate stream, read from its start.
type lazySection struct {
	buf  []byte    // inflated so far
	size uint64    // the whole section's size
	zr   io.Reader // nil once all of it is inflated, or it failed
	err  error
}

// upTo inflates the section's first n bytes (or all it has) and returns
// what is inflated.
func (l *lazySection) upTo(n uint64) []byte {
	const chunk = 256 << 10 // fewer, larger reads
	for l.zr != nil && uint64(len(l.buf)) < n {
		have := uint64(len(l.buf))
		want := l.size - have
		if n-have < want {
			want = n - have
		}
		if want < chunk {
			want = min(chunk, l.size-have)
		}
		if uint64(cap(l.buf))-have < want {
			// Grow: the header's size was not believed up front.
			c := min(max(2*uint64(cap(l.buf)), have+want), l.size)
			b := make([]byte, have, c)
			copy(b, l.buf)
			l.buf = b
		}
		m, err := io.ReadFull(l.zr, l.buf[have:have+want])
		l.buf = l.buf[:have+uint64(m)]
		if uint64(len(l.buf)) == l.size {
			l.zr = nil
		} else if err != nil {
			l.zr, l.err = nil, fmt.Errorf("inflating: %w", err)
		}
	}
	return l.buf
}

// ELF compression types (ch_type of Elf_Chdr).
const (
	compressZlib = 1
	compressZstd = 2
)

// openSection reads a section's bytes from r, to be inflated when the
// section is SHF_COMPRESSED.
func openSection(r io.ReaderAt, ef *elf.File, s *elf.Section) (*lazySection, error) {
	size := s.FileSize
	if size > maxSection {
		return nil, fmt.Errorf("%d bytes", size)
	}
	raw := make([]byte, size)
	if _, err := r.ReadAt(raw, int64(s.Offset)); err != nil {
		return nil, err
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		return &lazySection{buf: raw, size: size}, nil
	}
	return compressedSection(raw, ef.Class, ef.ByteOrder)
}

// inflateSection decodes a whole compressed section.
func inflateSection(raw []byte, class elf.Class, order binary.ByteOrder) ([]byte, error) {
	l, err := compressedSection(raw, class, order)
	if err != nil {
		return nil, err
	}
	b := l.upTo(all)
	return b, l.err
}

// compressedSection reads a compressed section's header, an Elf32_Chdr or
// Elf64_Chdr (ch_type, ch_size, ch_addralign; gABI "Section
// Compression"), and starts its stream. The inflated size is ch_size, at
// most maxSection. zlib streams are read as raw deflate after their
// two-byte header (RFC 1950) without checking the Adler-32: damaged DWARF
// is found by its parser anyway, and the checksum costs a tenth of a cold
// run. zstd streams are decoded whole.
func compressedSection(raw []byte, class elf.Class, order binary.ByteOrder) (*lazySection, error) {
	var typ uint32
	var size uint64
	var hdr int
	switch class {
	case elf.ELFCLASS64:
		if len(raw) < 24 {
			return nil, errors.New("short compression header")
		}
		typ, size, hdr = order.Uint32(raw), order.Uint64(raw[8:]), 24
	case elf.ELFCLASS32:
		if len(raw) < 12 {
			return nil, errors.New("short compression header")
		}
		typ, size, hdr = order.Uint32(raw), uint64(order.Uint32(raw[4:])), 12
	default:
		return nil, fmt.Errorf("ELF class %v", class)
	}
	if size > maxSection {
		return nil, fmt.Errorf("inflates to %d bytes", size)
	}
	stream := raw[hdr:]
	// Deflate inflates at most 1032 to 1; DWARF by 2 to 5. A header that
	// claims far more than its stream could give is not believed until
	// the bytes come.
	l := &lazySection{buf: make([]byte, 0, min(size, 64*uint64(len(stream))+4096)), size: size}
	switch typ {
	case compressZlib:
		if len(stream) < 2 || stream[0]&0x0f != 8 || (uint(stream[0])<<8|uint(stream[1]))%31 != 0 || stream[1]&0x20 != 0 {
			return nil, errors.New("not a zlib stream")
		}
		if size > 0 {
			l.zr = flate.NewReader(bytes.NewReader(stream[2:]))
		}
		return l, nil
	case compressZstd:
		z, err := zstd.NewReader(bytes.NewReader(stream), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxSection))
		if err != nil {
			return nil, err
		}
		defer z.Close()
		l.zr = z
		l.upTo(all)
		if l.err != nil {
			return nil, l.err
		}
		return l, nil
	}
	return nil, fmt.Errorf("compression type %d", typ)
}
