// Package cfi reads DWARF call frame information (DWARF 5 §6.4) from
// .eh_frame (LSB 5.0 "Exception Frames") and .debug_frame, and computes a
// caller's registers from a callee's.
//
// One Table type serves both sections; what differs (CIE id, how an FDE
// points at its CIE, pointer encodings) is data. Parsing entries and running
// their instructions into a Row are separate steps. Entries are not copied:
// they point into the section bytes. Every loop is bounded and every error
// says where, since the input comes from whatever files a crashed process
// had mapped.
package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// FormatError is malformed CFI, with its section offset.
type FormatError struct {
	Section string
	Off     uint64
	Msg     string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: offset %#x: %s", e.Section, e.Off, e.Msg)
}

// ErrNoFDE says no FDE covers a PC.
var ErrNoFDE = errors.New("cfi: no FDE covers the pc")

// Arch describes the file the tables come from.
type Arch struct {
	PtrSize int
	Order   binary.ByteOrder
	// AArch64 makes DW_CFA 0x2d mean AARCH64_negate_ra_state (it is
	// GNU_window_save on SPARC, which we do not support).
	AArch64 bool
}

// Table is one parsed .eh_frame or .debug_frame section.
type Table struct {
	name  string
	data  []byte
	addr  uint64 // section's address in the file (for pcrel)
	arch  Arch
	debug bool // .debug_frame

	hdr     []byte
	hdrAddr uint64
	tabOff  int // offset of the search table in hdr
	tabEnc  byte
	tabN    int

	once  sync.Once
	index []span // sorted, when there is no usable hdr
	ierr  error

	ciesMu sync.Mutex // Lookup and Row may run concurrently
	cies   map[uint64]*CIE
}

type span struct {
	lo, hi uint64
	off    uint64
}

// CIE is a Common Information Entry.
type CIE struct {
	Off         uint64
	Version     byte
	Aug         string
	CodeAlign   uint64
	DataAlign   int64
	RA          uint64
	FDEEnc      byte
	LSDAEnc     byte
	Signal      bool // 'S'
	AddrSize    int
	Initial     []byte // initial instructions
	initialOff  uint64 // section offset of Initial (for pcrel DW_CFA_set_loc)
	hasAugData  bool
	offset64Fmt bool
}

// FDE is a Frame Description Entry.
type FDE struct {
	Off   uint64
	CIE   *CIE
	Start uint64 // initial_location, in the file's address space
	End   uint64
	Insns []byte

	insnsOff uint64 // section offset of Insns (for pcrel DW_CFA_set_loc)
}

// NewEHFrame parses .eh_frame at address addr, with its .eh_frame_hdr when
// the file has one (hdr may be nil: gcc -static binaries have none).
func NewEHFrame(data []byte, addr uint64, hdr []byte, hdrAddr uint64, a Arch) (*Table, error) {
	if a.PtrSize != 4 && a.PtrSize != 8 {
		return nil, fmt.Errorf("cfi: pointer size %d", a.PtrSize)
	}
	t := &Table{name: ".eh_frame", data: data, addr: addr, arch: a, cies: map[uint64]*CIE{}}
	if hdr != nil {
		if err := t.parseHdr(hdr, hdrAddr); err != nil {
			// A bad hdr is not fatal: the linear index still works.
			t.hdr = nil
		}
	}
	return t, nil
}

// NewDebugFrame parses .debug_frame.
func NewDebugFrame(data []byte, a Arch) (*Table, error) {
	if a.PtrSize != 4 && a.PtrSize != 8 {
		return nil, fmt.Errorf("cfi: pointer size %d", a.PtrSize)
	}
	return &Table{name: ".debug_frame", data: data, arch: a, debug: true, cies: map[uint64]*CIE{}}, nil
}

// errf is called on error paths only, from many places: not inlined, so
// that each call is a call, not a copy (docs/design.md, "Footprint").
//
//go:noinline
func (t *Table) errf(off uint64, format string, args ...any) error {
	return &FormatError{t.name, off, fmt.Sprintf(format, args...)}
}

// parseHdr validates .eh_frame_hdr (version 1, eh_frame_ptr_enc,
// fde_count_enc, table_enc) and its binary search table.
func (t *Table) parseHdr(hdr []byte, hdrAddr uint64) error {
	if len(hdr) < 4 || hdr[0] != 1 {
		return errors.New("bad .eh_frame_hdr version")
	}
	r := reader{b: hdr, off: 4, order: t.arch.Order, ptr: t.arch.PtrSize}
	if _, err := r.encoded(hdr[1], hdrAddr, hdrAddr, nil); err != nil {
		return err
	}
	if hdr[2] == dwEHPEomit || hdr[3] == dwEHPEomit {
		return errors.New("no search table")
	}
	n, err := r.encoded(hdr[2], hdrAddr, hdrAddr, nil)
	if err != nil {
		return err
	}
	sz := encSize(hdr[3], t.arch.PtrSize)
	if sz == 0 {
		return errors.New("variable-size table encoding")
	}
	if n > uint64(len(hdr)-r.off)/uint64(2*sz) {
		return errors.New("search table runs past .eh_frame_hdr")
	}
	t.hdr, t.hdrAddr, t.tabOff, t.tabEnc, t.tabN = hdr, hdrAddr, r.off, hdr[3], int(n)
	return nil
}

func (t *Table) hdrEntry(i int) (loc, fde uint64, err error) {
	sz := encSize(t.tabEnc, t.arch.PtrSize)
	r := reader{b: t.hdr, off: t.tabOff + i*2*sz, order: t.arch.Order, ptr: t.arch.PtrSize}
	if loc, err = r.encoded(t.tabEnc, t.hdrAddr, t.hdrAddr, nil); err != nil {
		return
	}
	fde, err = r.encoded(t.tabEnc, t.hdrAddr, t.hdrAddr, nil)
	return
}

// hdrBefore is the index of the .eh_frame_hdr entry with the largest
// location at or below pc, -1 when none is.
func (t *Table) hdrBefore(pc uint64) int {
	return sort.Search(t.tabN, func(i int) bool {
		loc, _, err := t.hdrEntry(i)
		return err != nil || loc > pc
	}) - 1
}

// Lookup finds the FDE covering pc (an address in the file's own space).
func (t *Table) Lookup(pc uint64) (*FDE, error) {
	if t.hdr != nil && t.tabN > 0 {
		i := t.hdrBefore(pc)
		if i < 0 {
			return nil, ErrNoFDE
		}
		_, fa, err := t.hdrEntry(i)
		if err != nil {
			return nil, err
		}
		if fa < t.addr || fa-t.addr >= uint64(len(t.data)) {
			return nil, t.errf(0, ".eh_frame_hdr entry %d points outside .eh_frame (%#x)", i, fa)
		}
		f, err := t.fdeAt(fa - t.addr)
		if err != nil {
			return nil, err
		}
		if pc < f.Start || pc >= f.End {
			return nil, ErrNoFDE
		}
		return f, nil
	}
	t.once.Do(t.buildIndex)
	if t.ierr != nil && len(t.index) == 0 {
		return nil, t.ierr
	}
	i := sort.Search(len(t.index), func(i int) bool { return t.index[i].hi > pc })
	for ; i < len(t.index) && t.index[i].lo <= pc; i++ {
		if pc < t.index[i].hi {
			return t.fdeAt(t.index[i].off)
		}
	}
	return nil, ErrNoFDE
}

// buildIndex scans the section once and sorts its FDEs by address. Entries
// that do not parse are skipped; the first error is kept.
func (t *Table) buildIndex() {
	off := uint64(0)
	for off < uint64(len(t.data)) && len(t.index) < 1<<22 {
		e, err := t.entry(off)
		if err != nil {
			if t.ierr == nil {
				t.ierr = err
			}
			break
		}
		if e.length == 0 && !t.debug {
			break // zero terminator
		}
		if !e.isCIE {
			if f, err := t.fdeAt(off); err == nil {
				if f.End > f.Start {
					t.index = append(t.index, span{f.Start, f.End, off})
				}
			} else if t.ierr == nil {
				t.ierr = err
			}
		}
		off = e.next
	}
	sort.Slice(t.index, func(i, j int) bool { return t.index[i].lo < t.index[j].lo })
}

// All returns every FDE, for tests and tools.
func (t *Table) All() ([]*FDE, error) {
	t.once.Do(t.buildIndex)
	out := make([]*FDE, 0, len(t.index))
	for _, s := range t.index {
		f, err := t.fdeAt(s.off)
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, t.ierr
}

type entry struct {
	off     uint64
	length  uint64
	is64    bool
	isCIE   bool
	idField uint64 // offset of the CIE id / CIE pointer field
	idVal   uint64
	body    uint64 // offset after the id field
	next    uint64
}

// entry reads the length and id of the entry at off.
func (t *Table) entry(off uint64) (entry, error) {
	e := entry{off: off}
	r := reader{b: t.data, off: int(off), order: t.arch.Order}
	l, err := r.operand(fU4)
	if err != nil {
		return e, t.errf(off, "truncated length")
	}
	e.length = l
	if l == 0xffffffff {
		e.is64 = true
		if e.length, err = r.operand(fU8); err != nil {
			return e, t.errf(off, "truncated 64-bit length")
		}
	} else if l >= 0xfffffff0 {
		return e, t.errf(off, "reserved length %#x", l)
	}
	start := uint64(r.off)
	if e.length > uint64(len(t.data))-start {
		return e, t.errf(off, "length %#x runs past the section", e.length)
	}
	e.next = start + e.length
	if e.length == 0 {
		return e, nil
	}
	e.idField = start
	if e.is64 {
		e.idVal, err = r.operand(fU8)
	} else {
		e.idVal, err = r.operand(fU4)
	}
	if err != nil || uint64(r.off) > e.next {
		return e, t.errf(off, "truncated id")
	}
	e.body = uint64(r.off)
	if t.debug {
		e.isCIE = e.idVal == 0xffffffff || (e.is64 && e.idVal == ^uint64(0))
	} else {
		e.isCIE = e.idVal == 0
	}
	return e, nil
}

func (t *Table) cieAt(off uint64) (*CIE, error) {
	t.ciesMu.Lock()
	c, ok := t.cies[off]
	t.ciesMu.Unlock()
	if ok {
		return c, nil
	}
	e, err := t.entry(off)
	if err != nil {
		return nil, err
	}
	if !e.isCIE || e.length == 0 {
		return nil, t.errf(off, "CIE pointer leads to a non-CIE entry")
	}
	c = &CIE{Off: off, AddrSize: t.arch.PtrSize, offset64Fmt: e.is64}
	r := reader{b: t.data[:e.next], off: int(e.body), order: t.arch.Order, ptr: t.arch.PtrSize}
	if c.Version, err = r.u8(); err != nil {
		return nil, t.errf(off, "truncated CIE")
	}
	if c.Version != 1 && c.Version != 3 && c.Version != 4 {
		return nil, t.errf(off, "CIE version %d", c.Version)
	}
	aug, err := r.cstring()
	if err != nil {
		return nil, t.errf(off, "CIE augmentation: %v", err)
	}
	c.Aug = aug
	if c.Version == 4 {
		as, err1 := r.u8()
		ss, err2 := r.u8()
		if err1 != nil || err2 != nil {
			return nil, t.errf(off, "truncated CIE")
		}
		if as != 4 && as != 8 || ss != 0 {
			return nil, t.errf(off, "address size %d, segment size %d", as, ss)
		}
		c.AddrSize = int(as)
	}
	if len(aug) >= 2 && aug[:2] == "eh" {
		// Very old GCC: a pointer to the exception table follows.
		if _, err := r.bytes(t.arch.PtrSize); err != nil {
			return nil, t.errf(off, "truncated CIE")
		}
	}
	if c.CodeAlign, err = r.uleb(); err != nil {
		return nil, t.errf(off, "CIE code alignment: %v", err)
	}
	if c.DataAlign, err = r.sleb(); err != nil {
		return nil, t.errf(off, "CIE data alignment: %v", err)
	}
	if c.Version == 1 {
		v, err := r.u8()
		if err != nil {
			return nil, t.errf(off, "truncated CIE")
		}
		c.RA = uint64(v)
	} else if c.RA, err = r.uleb(); err != nil {
		return nil, t.errf(off, "CIE return address register: %v", err)
	}
	c.FDEEnc = dwEHPEabsptr
	c.LSDAEnc = dwEHPEomit
	if err := t.cieAug(c, &r); err != nil {
		return nil, err
	}
	c.Initial, c.initialOff = r.b[r.off:e.next], uint64(r.off)
	t.ciesMu.Lock()
	if len(t.cies) < 1<<16 {
		t.cies[off] = c
	}
	t.ciesMu.Unlock()
	return c, nil
}

// cieAug reads the augmentation data of CIE c, at r. Its string is in c.Aug.
func (t *Table) cieAug(c *CIE, r *reader) error {
	off, aug := c.Off, c.Aug
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasAugData = true
		n, err := r.uleb()
		if err != nil || n > uint64(len(r.b)-r.off) {
			return t.errf(off, "CIE augmentation data length")
		}
		ad := reader{b: r.b[:r.off+int(n)], off: r.off, order: t.arch.Order, ptr: t.arch.PtrSize}
		r.off += int(n)
	aug:
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				if c.FDEEnc, err = ad.u8(); err != nil {
					return t.errf(off, "truncated 'R'")
				}
			case 'L':
				if c.LSDAEnc, err = ad.u8(); err != nil {
					return t.errf(off, "truncated 'L'")
				}
			case 'P':
				enc, err := ad.u8()
				if err != nil {
					return t.errf(off, "truncated 'P'")
				}
				// Only skipped: what it points at does not matter here.
				if enc&0x70 != dwEHPEaligned {
					enc &= 0x0f
				}
				if _, err := ad.encoded(enc, 0, 0, nil); err != nil {
					return t.errf(off, "personality: %v", err)
				}
			case 'S':
				c.Signal = true
			case 'B', 'G':
				// AArch64 B-key and MTE-tagged frames: no data.
			default:
				// Unknown: the augmentation length lets us skip the rest.
				break aug
			}
		}
	} else {
		for _, ch := range aug {
			switch ch {
			case 'e', 'h', 'S', 'B', 'G':
			default:
				return t.errf(off, "unknown augmentation %q without 'z'", aug)
			}
			if ch == 'S' {
				c.Signal = true
			}
		}
	}
	return nil
}

func (t *Table) fdeAt(off uint64) (*FDE, error) {
	e, err := t.entry(off)
	if err != nil {
		return nil, err
	}
	if e.isCIE || e.length == 0 {
		return nil, t.errf(off, "expected an FDE")
	}
	var cieOff uint64
	if t.debug {
		cieOff = e.idVal
	} else {
		// .eh_frame: the CIE pointer counts back from its own field.
		if e.idVal > e.idField {
			return nil, t.errf(off, "CIE pointer %#x points before the section", e.idVal)
		}
		cieOff = e.idField - e.idVal
	}
	if cieOff >= uint64(len(t.data)) {
		return nil, t.errf(off, "CIE pointer %#x outside the section", cieOff)
	}
	c, err := t.cieAt(cieOff)
	if err != nil {
		return nil, err
	}
	f := &FDE{Off: off, CIE: c}
	r := reader{b: t.data[:e.next], off: int(e.body), order: t.arch.Order, ptr: c.AddrSize}
	enc := c.FDEEnc
	if t.debug {
		enc = dwEHPEabsptr
	}
	if f.Start, err = r.encoded(enc, t.addr, 0, nil); err != nil {
		return nil, t.errf(off, "FDE initial location: %v", err)
	}
	// The range has the same format but is never relative.
	rng, err := r.encoded(enc&0x0f, 0, 0, nil)
	if err != nil {
		return nil, t.errf(off, "FDE range: %v", err)
	}
	f.End = f.Start + rng
	if f.End < f.Start {
		return nil, t.errf(off, "FDE range wraps")
	}
	if c.hasAugData {
		n, err := r.uleb()
		if err != nil || n > uint64(len(r.b)-r.off) {
			return nil, t.errf(off, "FDE augmentation data length")
		}
		r.off += int(n)
	}
	f.Insns, f.insnsOff = r.b[r.off:e.next], uint64(r.off)
	return f, nil
}

// StartBefore returns the highest FDE start at or below pc (an address in
// the file's own space), whether or not that FDE covers pc: a function
// boundary, for call-site validation.
func (t *Table) StartBefore(pc uint64) (uint64, bool) {
	if t.hdr != nil && t.tabN > 0 {
		i := t.hdrBefore(pc)
		if i < 0 {
			return 0, false
		}
		loc, _, err := t.hdrEntry(i)
		return loc, err == nil
	}
	t.once.Do(t.buildIndex)
	i := sort.Search(len(t.index), func(i int) bool { return t.index[i].lo > pc }) - 1
	if i < 0 {
		return 0, false
	}
	return t.index[i].lo, true
}
