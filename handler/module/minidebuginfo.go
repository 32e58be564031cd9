package module

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"
	"time"

	"github.com/ulikunitz/xz/lzma"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/cfi"
	"github.com/unwound-dev/unwound/internal/sha256"
)

// MiniDebugInfo (GDB manual "MiniDebugInfo"): a stripped file may carry, in
// .gnu_debugdata, an xz stream holding a small ELF file with the .symtab
// that strip removed (Yocto, Fedora) and, from our build tool, the
// .debug_frame for code no loaded table covers. On 32-bit ARM and RISC-V
// default-flag C code that is the only unwind information there is.
//
// The section is read only for a module a PC falls in, and only when the
// unwinder asks for something the outer file lacks (a function start, CFI
// for a PC), once per crash. What it costs is bounded:
//   - the compressed section by MaxMiniDebugInfo;
//   - the decompressed ELF by MaxMiniDebugInfo, taken from the stream's
//     index before anything is allocated, and checked while decoding;
//   - the LZMA2 dictionary: the decoder allocates the dictionary it is
//     given, and block headers declare far more than a MiniDebugInfo
//     holds (xz's presets; a hostile header up to the format's maximum;
//     docs/minidebuginfo.md). A dictionary larger than the block's output
//     is never used, so the decoder gets the smallest that holds it (at
//     most the decompressed cap). The xz container is read here and only
//     LZMA2 data goes to the decoder (github.com/ulikunitz/xz/lzma);
//   - time: decoding stops when the module I/O deadline passes (the
//     freeze budget and the handler deadline, root.go).
//
// Anything wrong gives the module a MiniDebugInfo error (Module.Error) and
// the unwinder goes on with the file's other tables.

// MaxMiniDebugInfo caps both the compressed and the decompressed size of
// .gnu_debugdata.
const MaxMiniDebugInfo = 8 << 20

// miniDebugInfo is what the unwinder keeps of a .gnu_debugdata section.
type miniDebugInfo struct {
	funcs      []uint64   // FUNC symbol values of its .symtab (unsorted)
	debugFrame *cfi.Table // its .debug_frame, nil when absent
}

// MiniDebugInfoError is why a file's .gnu_debugdata could not be used, nil
// when it was, when it was not needed yet, or when the file has none.
func (f *File) MiniDebugInfoError() error { return f.mdiErr }

// HasMiniDebugInfo reports whether the file has a .gnu_debugdata section.
func (f *File) HasMiniDebugInfo() bool { return f.mdiSec.Size > 0 }

// miniDebugInfo decompresses and parses .gnu_debugdata on first use.
func (f *File) miniDebugInfo() *miniDebugInfo {
	if f.mdiDone || !f.HasMiniDebugInfo() {
		return f.mdi
	}
	f.mdiDone = true
	m, err := loadMiniDebugInfo(f.r, f.mdiSec, f)
	if err != nil {
		f.mdiErr = fmt.Errorf(".gnu_debugdata: %w", err)
		return nil
	}
	f.mdi = m
	return m
}

// CFITables returns the CFI tables to try for vaddr, in order: the file's
// .debug_frame, or that of its MiniDebugInfo when the file's own tables
// have no FDE for vaddr, then .eh_frame. Nil entries are skipped by the
// caller.
func (f *File) CFITables(vaddr uint64) []*cfi.Table {
	df := f.DebugFrame
	if df == nil && f.HasMiniDebugInfo() {
		covered := false
		if f.EHFrame != nil {
			if _, err := f.EHFrame.Lookup(vaddr); err == nil {
				covered = true
			}
		}
		if !covered {
			if m := f.miniDebugInfo(); m != nil {
				df = m.debugFrame
			}
		}
	}
	return []*cfi.Table{df, f.EHFrame}
}

// loadMiniDebugInfo reads the section, checks and decompresses its xz
// stream, and reads the inner ELF's symbols and .debug_frame. outer gives
// the machine, class and byte order the inner file must have.
func loadMiniDebugInfo(r io.ReaderAt, sec elf.SectionHeader, outer *File) (*miniDebugInfo, error) {
	if sec.Size > MaxMiniDebugInfo {
		return nil, fmt.Errorf("%d bytes compressed, more than the %d this handler reads", sec.Size, MaxMiniDebugInfo)
	}
	z, err := readSized(r, sec.Offset, sec.Size)
	if err != nil {
		return nil, err
	}
	inner, err := decompressXZ(z, MaxMiniDebugInfo)
	if err != nil {
		return nil, err
	}
	return parseMiniELF(inner, outer)
}

// parseMiniELF reads the FUNC symbols and .debug_frame of a decompressed
// MiniDebugInfo ELF. Nothing returned points into b.
func parseMiniELF(b []byte, outer *File) (*miniDebugInfo, error) {
	ef, err := elf.NewFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	if ef.Machine != outer.Machine || ef.Class != outer.Class || ef.ByteOrder != outer.Order {
		return nil, fmt.Errorf("inner ELF is %v %v, the file %v %v", ef.Machine, ef.Class, outer.Machine, outer.Class)
	}
	m := &miniDebugInfo{}
	if s := ef.SectionByType(elf.SHT_SYMTAB); s != nil {
		m.funcs = funcStarts(bytes.NewReader(b), []elf.SectionHeader{s.SectionHeader}, ef.Class, ef.ByteOrder)
	}
	if s := ef.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
		df, err := s.Data() // a copy: b can go
		if err != nil {
			return nil, err
		}
		ca := cfi.Arch{PtrSize: ptrSize(ef.Class), Order: ef.ByteOrder, AArch64: ef.Machine == elf.EM_AARCH64}
		if m.debugFrame, err = cfi.NewDebugFrame(df, ca); err != nil {
			return nil, fmt.Errorf(".debug_frame: %w", err)
		}
	}
	return m, nil
}

// xz container format (The .xz File Format 1.2.1, tukaani.org): stream
// header (12 bytes), blocks, index, stream footer (12 bytes).
const (
	xzHeaderLen = 12
	xzFooterLen = 12
	lzma2Filter = 0x21
)

var errXZ = errors.New("not a well-formed xz stream")

// xzErr is errXZ, saying what is wrong. One call site for fmt.Errorf
// instead of one per check keeps the handler small.
//
//go:noinline
func xzErr(what string) error { return fmt.Errorf("xz: %w (%s)", errXZ, what) }

//go:noinline
func xzBlockErr(i int, err error) error { return fmt.Errorf("xz: block %d: %w", i, err) }

// decompressXZ decodes a single xz stream of at most max decompressed
// bytes. The container (stream header and footer, index, block headers,
// checks) is read here; only the LZMA2 data goes to the decoder, with a
// dictionary no larger than its block's output. The sizes come from the
// index, checked before any allocation.
func decompressXZ(z []byte, max uint64) ([]byte, error) {
	blocks, total, err := xzIndex(z)
	if err != nil {
		return nil, err
	}
	if total > max {
		return nil, fmt.Errorf("xz: %d bytes decompressed, more than the %d allowed", total, max)
	}
	checkType := z[7] & 0x0f
	checkLen, ok := xzCheckLen[checkType]
	if !ok {
		return nil, fmt.Errorf("xz: check type %d not supported", checkType)
	}
	out := make([]byte, total)
	pos := uint64(0)
	for i, b := range blocks {
		hlen, dict, err := xzBlockHeader(z[b.off:b.end], b.size)
		if err != nil {
			return nil, err
		}
		data := b.off + uint64(hlen)
		if b.unpadded < uint64(hlen)+checkLen || data > b.end {
			return nil, fmt.Errorf("xz: %w (block %d sizes)", errXZ, i)
		}
		dataEnd := b.off + b.unpadded - checkLen
		r, err := lzma.Reader2Config{DictCap: dict}.NewReader2(&deadlineReader{r: bytes.NewReader(z[data:dataEnd])})
		if err != nil {
			return nil, xzBlockErr(i, err)
		}
		dst := out[pos : pos+b.size]
		if _, err := io.ReadFull(r, dst); err != nil {
			return nil, xzBlockErr(i, err)
		}
		// The block must end here: LZMA2's end marker, no more output.
		var one [1]byte
		if n, err := r.Read(one[:]); n != 0 || err != io.EOF {
			if err == nil || err == io.EOF {
				err = errors.New("more data than the index says")
			}
			return nil, xzBlockErr(i, err)
		}
		// Block padding (to four bytes), then the check.
		if err := xzCheck(checkType, dst, z[b.end-checkLen:b.end]); err != nil {
			return nil, xzBlockErr(i, err)
		}
		pos += b.size
	}
	return out, nil
}

// xzCheckLen is the size of each supported check type (xz format §2.1.1.2).
var xzCheckLen = map[byte]uint64{0: 0, 1: 4, 4: 8, 10: 32}

var crc64Table = crc64.MakeTable(crc64.ECMA)

// xzCheck verifies a block's check field against its output.
func xzCheck(typ byte, data, want []byte) error {
	var got []byte
	switch typ {
	case 0:
		return nil
	case 1:
		got = binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE(data))
	case 4:
		got = binary.LittleEndian.AppendUint64(nil, crc64.Checksum(data, crc64Table))
	case 10:
		sum := sha256.Sum256(data)
		got = sum[:]
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%w (check of the block's data)", errXZ)
	}
	return nil
}

type xzBlock struct {
	off, end uint64 // the block's bytes in the stream, padding included
	unpadded uint64 // header, data and check, from the index
	size     uint64 // its uncompressed size, from the index
}

// xzIndex reads the stream footer and index (xz format §2.1.2, §4) and
// returns where each block is and how much it decompresses to.
func xzIndex(z []byte) ([]xzBlock, uint64, error) {
	n := uint64(len(z))
	if n < xzHeaderLen+xzFooterLen || !bytes.Equal(z[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}) || !bytes.Equal(z[n-2:], []byte("YZ")) {
		return nil, 0, xzErr("magic")
	}
	if crc32.ChecksumIEEE(z[6:8]) != binary.LittleEndian.Uint32(z[8:]) || z[6] != 0 {
		return nil, 0, xzErr("stream header")
	}
	foot := z[n-xzFooterLen:]
	if crc32.ChecksumIEEE(foot[4:10]) != binary.LittleEndian.Uint32(foot) {
		return nil, 0, xzErr("footer CRC32")
	}
	if !bytes.Equal(foot[8:10], z[6:8]) {
		return nil, 0, xzErr("header and footer flags differ")
	}
	isize := (uint64(binary.LittleEndian.Uint32(foot[4:])) + 1) * 4
	if isize > n-xzHeaderLen-xzFooterLen {
		return nil, 0, xzErr("index size")
	}
	istart := n - xzFooterLen - isize
	idx := z[istart : n-xzFooterLen]
	if crc32.ChecksumIEEE(idx[:len(idx)-4]) != binary.LittleEndian.Uint32(idx[len(idx)-4:]) {
		return nil, 0, xzErr("index CRC32")
	}
	if idx[0] != 0 {
		return nil, 0, xzErr("index indicator")
	}
	p := idx[1 : len(idx)-4]
	count, p, ok := xzVarint(p)
	if !ok || count > uint64(len(p))/2 {
		return nil, 0, xzErr("record count")
	}
	var blocks []xzBlock
	var total uint64
	off := uint64(xzHeaderLen)
	for i := uint64(0); i < count; i++ {
		var unpadded, size uint64
		if unpadded, p, ok = xzVarint(p); !ok {
			return nil, 0, xzErr("index record")
		}
		if size, p, ok = xzVarint(p); !ok {
			return nil, 0, xzErr("index record")
		}
		padded := (unpadded + 3) &^ 3
		if unpadded < 5 || padded > istart-off {
			return nil, 0, fmt.Errorf("xz: %w (block %d runs past the index)", errXZ, i)
		}
		if size > MaxMiniDebugInfo || total+size < total {
			return nil, 0, fmt.Errorf("xz: block %d: %d bytes decompressed, too many", i, size)
		}
		blocks = append(blocks, xzBlock{off, off + padded, unpadded, size})
		total += size
		off += padded
	}
	if off != istart {
		return nil, 0, xzErr("blocks and index disagree")
	}
	return blocks, total, nil
}

// xzVarint decodes a multibyte integer (xz format §1.2): at most 9 bytes.
//
//go:noinline
func xzVarint(b []byte) (uint64, []byte, bool) {
	var v uint64
	for i := 0; i < len(b) && i < 9; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if i > 0 && b[i] == 0 {
				return 0, nil, false // not the shortest form
			}
			return v, b[i+1:], true
		}
	}
	return 0, nil, false
}

// xzBlockHeader reads a block header (xz format §3.1, LZMA2 filter
// properties §5.3.1) and returns its length and the dictionary to decode
// with: the one it declares, or the smallest that holds the block's size
// bytes when that is less. LZMA2 never refers back further than the output
// so far, so a larger dictionary is never used; the decoder allocates
// whatever it is given.
func xzBlockHeader(blk []byte, size uint64) (int, int, error) {
	if len(blk) == 0 || blk[0] == 0 {
		return 0, 0, xzErr("block header")
	}
	hlen := (int(blk[0]) + 1) * 4
	if hlen > len(blk) {
		return 0, 0, xzErr("block header size")
	}
	h := blk[:hlen]
	if crc32.ChecksumIEEE(h[:hlen-4]) != binary.LittleEndian.Uint32(h[hlen-4:]) {
		return 0, 0, xzErr("block header CRC32")
	}
	flags := h[1]
	if flags&0x3c != 0 {
		return 0, 0, xzErr("reserved block flags")
	}
	if flags&3 != 0 {
		return 0, 0, errors.New("xz: filters before LZMA2 (BCJ, delta) not supported")
	}
	p := h[2 : hlen-4]
	var ok bool
	for _, present := range []bool{flags&0x40 != 0, flags&0x80 != 0} {
		if present {
			if _, p, ok = xzVarint(p); !ok {
				return 0, 0, xzErr("block sizes")
			}
		}
	}
	var id, psize uint64
	if id, p, ok = xzVarint(p); !ok {
		return 0, 0, xzErr("filter flags")
	}
	if psize, p, ok = xzVarint(p); !ok || psize > uint64(len(p)) {
		return 0, 0, xzErr("filter properties")
	}
	if id != lzma2Filter {
		return 0, 0, fmt.Errorf("xz: filter %#x not supported (only LZMA2)", id)
	}
	if psize != 1 || p[0] > 40 {
		return 0, 0, xzErr("LZMA2 filter properties")
	}
	b := min(p[0], dictByte(size))
	if b > 30 { // past what an int holds on 32-bit boards; size is capped far below
		return 0, 0, fmt.Errorf("xz: %w (dictionary for %d bytes)", errXZ, size)
	}
	return hlen, int(uint64(2|b&1) << (b/2 + 11)), nil
}

// dictByte is the smallest LZMA2 dictionary-size property whose size,
// (2 | b&1) << (b/2 + 11), holds n bytes; the format's smallest at least.
func dictByte(n uint64) byte {
	for b := byte(0); b < 40; b++ {
		if uint64(2|b&1)<<(b/2+11) >= n {
			return b
		}
	}
	return 40
}

// deadlineReader fails once the module I/O deadline has passed, so that
// decoding, which reads as it goes, stops with it.
type deadlineReader struct{ r io.Reader }

func (d *deadlineReader) Read(p []byte) (int, error) {
	if t := ioDeadline.Load(); t != 0 && time.Now().UnixNano() > t {
		return 0, ErrTimeout
	}
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	return d.r.Read(p)
}
