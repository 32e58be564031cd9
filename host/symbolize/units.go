package symbolize

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Reading a few units of a large file. dwarf.New parses the abbreviation
// table of every unit in .debug_info (in libc6-dbg, a table per unit, a
// megabyte in all), the unit address table needs every unit's first
// entry, and both need all of .debug_info inflated: most of a cold run.
// When the file has a .debug_aranges, the address table comes from it;
// .debug_info and .debug_line are inflated only up to the last unit a
// lookup needs (a deflate stream is read from its start), and dwarf.New
// sees the units up to there with only the needed ones' own tables: every
// other unit's header points at one of those tables (we patch the
// abbreviation offset in our inflated copy), so its table is never
// parsed and its entries never read. A unit is enabled, and dwarf.Data
// made again, when a PC falls in it or a name refers into it. A PC that
// .debug_aranges does not cover (an incomplete table) turns the index
// back to reading every unit's entry, as without .debug_aranges.

// unitHeader is one unit header in .debug_info (DWARF 5 §7.5.1; DWARF 2-4
// §7.5.1.1): where it is and where its abbreviation offset is.
type unitHeader struct {
	off, end  uint64
	die       uint64 // offset of the unit's first entry: dwarf.Offset of its unit entry
	abbrevPos uint64 // offset of the debug_abbrev_offset field
	wide      bool   // 64-bit DWARF: the field is 8 bytes
	abbrev    uint64 // the field's value
}

// maxUnitHeader is the longest unit header: 64-bit DWARF 5 type unit.
const maxUnitHeader = 12 + 2 + 2 + 8 + 8 + 8

// parseUnitHeader reads the unit header at off; b holds at least its
// first maxUnitHeader bytes, or the rest of the section.
func parseUnitHeader(b []byte, off uint64, order binary.ByteOrder) (unitHeader, error) {
	h := unitHeader{off: off}
	n := uint64(len(b))
	if off > n || n-off < 4 {
		return h, fmt.Errorf("unit at %#x: short header", off)
	}
	length, p := uint64(order.Uint32(b[off:])), off+4
	switch {
	case length == 0xffffffff:
		if n-p < 8 {
			return h, fmt.Errorf("unit at %#x: short header", off)
		}
		length, p, h.wide = order.Uint64(b[p:]), p+8, true
	case length >= 0xfffffff0:
		return h, fmt.Errorf("unit at %#x: reserved length %#x", off, length)
	}
	if length > all-p {
		return h, fmt.Errorf("unit at %#x: length %#x", off, length)
	}
	h.end = p + length
	offsz := uint64(4)
	if h.wide {
		offsz = 8
	}
	if length < 2+2+offsz || n-p < 2+2+offsz {
		return h, fmt.Errorf("unit at %#x: short header", off)
	}
	version := order.Uint16(b[p:])
	p += 2
	var extra uint64 // after debug_abbrev_offset
	switch {
	case version == 5:
		switch b[p] { // unit_type
		case 0x04, 0x05: // skeleton, split_compile: dwo_id
			extra = 8
		case 0x02, 0x06: // type, split_type: signature, type_offset
			extra = 8 + offsz
		}
		p += 2 // unit_type, address_size
	case version >= 2 && version <= 4:
		extra = 1 // address_size
	default:
		return h, fmt.Errorf("unit at %#x: version %d", off, version)
	}
	if n-p < offsz {
		return h, fmt.Errorf("unit at %#x: short header", off)
	}
	h.abbrevPos = p
	if h.wide {
		h.abbrev = order.Uint64(b[p:])
	} else {
		h.abbrev = uint64(order.Uint32(b[p:]))
	}
	h.die = p + offsz + extra
	if h.die > h.end {
		return h, fmt.Errorf("unit at %#x: short header", off)
	}
	return h, nil
}

// arange is one address range of .debug_aranges and its unit's offset.
type arange struct {
	lo, hi uint64
	unit   uint64
}

// parseAranges reads .debug_aranges (DWARF 5 §6.1.2): sets of a header
// (unit_length, version 2, debug_info_offset, address_size,
// segment_selector_size) and (address, length) tuples aligned to twice
// the address size, ended by (0, 0).
func parseAranges(b []byte, order binary.ByteOrder) ([]arange, error) {
	var out []arange
	n := uint64(len(b))
	for off := uint64(0); off < n; {
		if n-off < 4 {
			return nil, fmt.Errorf("aranges at %#x: short header", off)
		}
		length, p, wide := uint64(order.Uint32(b[off:])), off+4, false
		if length == 0xffffffff {
			if n-p < 8 {
				return nil, fmt.Errorf("aranges at %#x: short header", off)
			}
			length, p, wide = order.Uint64(b[p:]), p+8, true
		} else if length >= 0xfffffff0 {
			return nil, fmt.Errorf("aranges at %#x: reserved length", off)
		}
		if length > n-p {
			return nil, fmt.Errorf("aranges at %#x: length past the section", off)
		}
		end := p + length
		hdr := uint64(2 + 4 + 2)
		if wide {
			hdr += 4
		}
		if end-p < hdr {
			return nil, fmt.Errorf("aranges at %#x: short header", off)
		}
		if v := order.Uint16(b[p:]); v != 2 {
			return nil, fmt.Errorf("aranges at %#x: version %d", off, v)
		}
		p += 2
		var unit uint64
		if wide {
			unit, p = order.Uint64(b[p:]), p+8
		} else {
			unit, p = uint64(order.Uint32(b[p:])), p+4
		}
		asize, ssize := uint64(b[p]), b[p+1]
		p += 2
		if asize != 4 && asize != 8 || ssize != 0 {
			return nil, fmt.Errorf("aranges at %#x: address size %d, segment size %d", off, asize, ssize)
		}
		// Tuples start at a multiple of twice the address size from the
		// set's start.
		if r := (p - off) % (2 * asize); r != 0 {
			p += 2*asize - r
		}
		for p+2*asize <= end {
			var a, l uint64
			if asize == 8 {
				a, l = order.Uint64(b[p:]), order.Uint64(b[p+8:])
			} else {
				a, l = uint64(order.Uint32(b[p:])), uint64(order.Uint32(b[p+4:]))
			}
			p += 2 * asize
			if a == 0 && l == 0 {
				break
			}
			if l > 0 && a+l > a {
				out = append(out, arange{a, a + l, unit})
			}
		}
		off = end
	}
	return out, nil
}

// arangesIndex returns an index whose address table is .debug_aranges,
// nil when the file has none usable. Units are numbered as .debug_aranges
// names them; their headers are read when they are enabled.
func arangesIndex(ds *dwarfSections) *dwarfIndex {
	ar, err := parseAranges(ds.bytes("aranges", all), ds.order)
	if err != nil || len(ar) == 0 || ds.sec["info"] == nil {
		return nil
	}
	ix := &dwarfIndex{ds: ds, byHdr: map[uint64]int32{}, fileIdx: map[string]int32{}, names: map[dwarf.Offset]nameInfo{}}
	for _, a := range ar {
		k, ok := ix.byHdr[a.unit]
		if !ok {
			k = int32(len(ix.units))
			ix.units = append(ix.units, &unitIndex{hdr: a.unit})
			ix.byHdr[a.unit] = k
		}
		ix.spans = append(ix.spans, unitSpan{a.lo, a.hi, k})
	}
	ix.sortSpans()
	return ix
}

// walkTo reads unit headers until the one holding info offset off (and
// inflates .debug_info that far); it returns that header's index.
func (ix *dwarfIndex) walkTo(off uint64) (int, error) {
	info := ix.ds.sec["info"]
	for {
		if n := len(ix.hdrs); n > 0 && off < ix.hdrs[n-1].end {
			i := sort.Search(n, func(i int) bool { return ix.hdrs[i].off > off }) - 1
			if i < 0 {
				return -1, fmt.Errorf("offset %#x: no unit", off)
			}
			return i, nil
		}
		if len(ix.hdrs) >= maxUnits {
			return -1, errors.New("too many units")
		}
		next := uint64(0)
		if n := len(ix.hdrs); n > 0 {
			next = ix.hdrs[n-1].end
		}
		b := info.upTo(next + maxUnitHeader)
		if next >= uint64(len(b)) {
			return -1, fmt.Errorf("offset %#x: past .debug_info", off)
		}
		h, err := parseUnitHeader(b, next, ix.ds.order)
		if err != nil {
			return -1, err
		}
		if b = info.upTo(h.end); uint64(len(b)) < h.end {
			return -1, fmt.Errorf("unit at %#x: past .debug_info", h.off)
		}
		ix.hdrs = append(ix.hdrs, h)
		ix.enabled = append(ix.enabled, false)
	}
}

// enableUnit makes sure unit k (numbered by arangesIndex) is in ix.d.
func (ix *dwarfIndex) enableUnit(k int32) error {
	u := ix.units[k]
	if u.hdrIdx > 0 {
		return ix.enable(u.hdrIdx - 1)
	}
	i, err := ix.walkTo(u.hdr)
	if err != nil {
		return err
	}
	if ix.hdrs[i].off != u.hdr {
		return fmt.Errorf(".debug_aranges names %#x, not a unit", u.hdr)
	}
	u.hdrIdx, u.off = i+1, dwarf.Offset(ix.hdrs[i].die)
	return ix.enable(i)
}

// enableAt makes sure the unit holding info offset off is in ix.d.
func (ix *dwarfIndex) enableAt(off uint64) error {
	i, err := ix.walkTo(off)
	if err != nil {
		return err
	}
	return ix.enable(i)
}

// enable makes sure header i's unit is in ix.d, making it again if not,
// with .debug_line inflated as far as the unit's line program.
func (ix *dwarfIndex) enable(i int) error {
	if ix.enabled[i] && ix.d != nil {
		return nil
	}
	ix.enabled[i] = true
	if err := ix.remake(); err != nil {
		return err
	}
	return ix.extendLines(i)
}

// prepare enables at once the units that hold addrs: one dwarf.Data
// for a whole report rather than one per unit.
func (ix *dwarfIndex) prepare(addrs []uint64) {
	if ix.byHdr == nil {
		return
	}
	var idx []int
	for _, a := range addrs {
		for _, k := range ix.unitsAt(a) {
			u := ix.units[k]
			if u.hdrIdx == 0 {
				i, err := ix.walkTo(u.hdr)
				if err != nil || ix.hdrs[i].off != u.hdr {
					continue // enableUnit says why, later
				}
				u.hdrIdx, u.off = i+1, dwarf.Offset(ix.hdrs[i].die)
			}
			if !ix.enabled[u.hdrIdx-1] {
				ix.enabled[u.hdrIdx-1] = true
				idx = append(idx, u.hdrIdx-1)
			}
		}
	}
	if len(idx) == 0 || ix.remake() != nil {
		return
	}
	ix.extendLines(idx...)
}

// extendLines inflates .debug_line as far as the line programs of units
// (header indexes), and makes dwarf.Data again when it grew.
func (ix *dwarfIndex) extendLines(units ...int) error {
	line := ix.ds.sec["line"]
	if line == nil {
		return nil
	}
	need := ix.lineEnd
	r := ix.d.Reader()
	for _, i := range units {
		r.Seek(dwarf.Offset(ix.hdrs[i].die))
		cu, err := r.Next()
		if err != nil || cu == nil {
			continue
		}
		off, ok := cu.Val(dwarf.AttrStmtList).(int64)
		if !ok || off < 0 {
			continue
		}
		o := uint64(off)
		b := line.upTo(o + 12)
		if o+4 > uint64(len(b)) {
			continue // LineReader says what is wrong
		}
		end, l := o+4, uint64(ix.ds.order.Uint32(b[o:]))
		if l == 0xffffffff && o+12 <= uint64(len(b)) {
			end, l = o+12, ix.ds.order.Uint64(b[o+4:])
		}
		if l > all-end {
			continue
		}
		if end += l; end > need {
			need = end
		}
	}
	if need <= ix.lineEnd {
		return nil
	}
	line.upTo(need)
	ix.lineEnd = need
	return ix.remake()
}

// remake patches the abbreviation offsets of the units not enabled to the
// table of an enabled unit, and makes dwarf.Data again of the units
// walked so far.
func (ix *dwarfIndex) remake() error {
	info := ix.ds.sec["info"].buf
	sub := uint64(0)
	for k, on := range ix.enabled {
		if on {
			sub = ix.hdrs[k].abbrev
			break
		}
	}
	for k, h := range ix.hdrs {
		v := sub
		if ix.enabled[k] {
			v = h.abbrev
		}
		if h.wide {
			ix.ds.order.PutUint64(info[h.abbrevPos:], v)
		} else {
			ix.ds.order.PutUint32(info[h.abbrevPos:], uint32(v))
		}
	}
	end := uint64(0)
	if n := len(ix.hdrs); n > 0 {
		end = ix.hdrs[n-1].end
	}
	aend := uint64(0)
	for k, on := range ix.enabled {
		if on {
			if e := ix.abbrevEnd(ix.hdrs[k].abbrev); e > aend {
				aend = e
			}
		}
	}
	d, err := ix.ds.data(end, ix.lineEnd, aend)
	if err != nil {
		return err
	}
	ix.d, ix.r = d, d.Reader()
	return nil
}

// readAll turns an aranges index into one that read every unit's entry:
// for PCs .debug_aranges does not cover.
func (ix *dwarfIndex) readAll() error {
	if _, err := ix.walkTo(all - 1); err != nil && uint64(len(ix.ds.sec["info"].upTo(all))) != ix.walkedEnd() {
		return err
	}
	for k := range ix.enabled {
		ix.enabled[k] = true
	}
	if l := ix.ds.sec["line"]; l != nil {
		l.upTo(all)
	}
	ix.lineEnd = all
	if a := ix.ds.sec["abbrev"]; a != nil {
		a.upTo(all)
	}
	if err := ix.remake(); err != nil {
		return err
	}
	ix.hdrs, ix.enabled, ix.byHdr = nil, nil, nil
	full, err := newIndex(ix.d)
	// Units already read stay; the address table is the full one.
	byOff := map[dwarf.Offset]*unitIndex{}
	for _, u := range ix.units {
		if u.loaded {
			byOff[u.off] = u
		}
	}
	for i, u := range full.units {
		if old, ok := byOff[u.off]; ok {
			full.units[i] = old
		}
	}
	ix.units, ix.spans, ix.maxHi, ix.loose = full.units, full.spans, full.maxHi, full.loose
	return err
}

func (ix *dwarfIndex) walkedEnd() uint64 {
	if n := len(ix.hdrs); n > 0 {
		return ix.hdrs[n-1].end
	}
	return 0
}

// abbrevEnd returns where the abbreviation table at off ends (DWARF 5
// §7.5.3: entries of code, tag, children flag and (attribute, form)
// pairs ending in (0, 0), with a constant after DW_FORM_implicit_const;
// code 0 ends the table), inflating .debug_abbrev that far; the whole
// section's length when the table does not end.
func (ix *dwarfIndex) abbrevEnd(off uint64) uint64 {
	l := ix.ds.sec["abbrev"]
	if l == nil {
		return 0
	}
	if e, ok := ix.abbrevEnds[off]; ok {
		return e
	}
	if ix.abbrevEnds == nil {
		ix.abbrevEnds = map[uint64]uint64{}
	}
	want := off + 4096
	for {
		b := l.upTo(want)
		end, ok := scanAbbrevTable(b, off)
		if ok || uint64(len(b)) < want {
			if !ok {
				end = uint64(len(l.upTo(all)))
			}
			ix.abbrevEnds[off] = end
			return end
		}
		want += want / 2
	}
}

// scanAbbrevTable returns the end of the table at off in b, false when b
// ends first.
func scanAbbrevTable(b []byte, off uint64) (uint64, bool) {
	p := off
	uleb := func() (uint64, bool) {
		var v uint64
		for shift := uint(0); p < uint64(len(b)); shift += 7 {
			c := b[p]
			p++
			if shift < 64 {
				v |= uint64(c&0x7f) << shift
			}
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	for {
		code, ok := uleb()
		if !ok {
			return 0, false
		}
		if code == 0 {
			return p, true
		}
		if _, ok := uleb(); !ok { // tag
			return 0, false
		}
		if p++; p > uint64(len(b)) { // children
			return 0, false
		}
		for {
			attr, ok1 := uleb()
			form, ok2 := uleb()
			if !ok1 || !ok2 {
				return 0, false
			}
			if attr == 0 && form == 0 {
				break
			}
			if form == 0x21 { // DW_FORM_implicit_const: an SLEB128
				if _, ok := uleb(); !ok {
					return 0, false
				}
			}
		}
	}
}
