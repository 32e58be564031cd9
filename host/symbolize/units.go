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
// megabyte in all) and the unit address table needs every unit's first
// entry: a fifth of a cold run. When the file has a .debug_aranges, the
// address table comes from it, and dwarf.New sees only the units a lookup
// needs with their own tables: every other unit's header points at one of
// those tables (we patch the abbreviation offset in our inflated copy of
// .debug_info), so its table is never parsed, and its entries are never
// read. A unit is enabled, and dwarf.Data made again, when a PC falls in
// it or a name refers into it. A PC that .debug_aranges does not cover
// (an incomplete table) turns the index back to reading every unit's
// entry, as without .debug_aranges.

// unitHeader is one unit header in .debug_info (DWARF 5 §7.5.1; DWARF 2-4
// §7.5.1.1): where it is and where its abbreviation offset is.
type unitHeader struct {
	off, end  uint64
	die       uint64 // offset of the unit's first entry: dwarf.Offset of its unit entry
	abbrevPos uint64 // offset of the debug_abbrev_offset field
	wide      bool   // 64-bit DWARF: the field is 8 bytes
	abbrev    uint64 // the field's value
}

// unitHeaders walks the unit headers of .debug_info.
func unitHeaders(info []byte, order binary.ByteOrder) ([]unitHeader, error) {
	var out []unitHeader
	n := uint64(len(info))
	for off := uint64(0); off < n; {
		if len(out) >= maxUnits {
			return nil, errors.New("too many units")
		}
		h := unitHeader{off: off}
		if n-off < 4 {
			return nil, fmt.Errorf("unit at %#x: short header", off)
		}
		length, p := uint64(order.Uint32(info[off:])), off+4
		switch {
		case length == 0xffffffff:
			if n-p < 8 {
				return nil, fmt.Errorf("unit at %#x: short header", off)
			}
			length, p, h.wide = order.Uint64(info[p:]), p+8, true
		case length >= 0xfffffff0:
			return nil, fmt.Errorf("unit at %#x: reserved length %#x", off, length)
		}
		if length > n-p {
			return nil, fmt.Errorf("unit at %#x: length %#x past the section", off, length)
		}
		h.end = p + length
		need := uint64(2 + 2 + 4)
		if h.wide {
			need += 4
		}
		if length < need {
			return nil, fmt.Errorf("unit at %#x: short header", off)
		}
		version := order.Uint16(info[p:])
		p += 2
		offsz := uint64(4)
		if h.wide {
			offsz = 8
		}
		var extra uint64 // after debug_abbrev_offset
		switch {
		case version == 5:
			switch info[p] { // unit_type
			case 0x04, 0x05: // skeleton, split_compile: dwo_id
				extra = 8
			case 0x02, 0x06: // type, split_type: signature, type_offset
				extra = 8 + offsz
			}
			p += 2 // unit_type, address_size
		case version >= 2 && version <= 4:
			extra = 1 // address_size
		default:
			return nil, fmt.Errorf("unit at %#x: version %d", off, version)
		}
		h.abbrevPos = p
		if h.wide {
			h.abbrev = order.Uint64(info[p:])
		} else {
			h.abbrev = uint64(order.Uint32(info[p:]))
		}
		h.die = p + offsz + extra
		if h.die > h.end {
			return nil, fmt.Errorf("unit at %#x: short header", off)
		}
		out = append(out, h)
		off = h.end
	}
	return out, nil
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
// nil when the file has none usable.
func arangesIndex(ds *dwarfSections) *dwarfIndex {
	ar, err := parseAranges(ds.dat["aranges"], ds.order)
	if err != nil || len(ar) == 0 {
		return nil
	}
	hdrs, err := unitHeaders(ds.dat["info"], ds.order)
	if err != nil || len(hdrs) == 0 {
		return nil
	}
	ix := &dwarfIndex{ds: ds, hdrs: hdrs, enabled: make([]bool, len(hdrs)), fileIdx: map[string]int32{}, names: map[dwarf.Offset]nameInfo{}}
	for _, h := range hdrs {
		ix.units = append(ix.units, &unitIndex{off: dwarf.Offset(h.die)})
	}
	for _, a := range ar {
		k := ix.unitOf(a.unit)
		if k < 0 || hdrs[k].off != a.unit {
			return nil // not a unit's start: do not trust the table
		}
		ix.spans = append(ix.spans, unitSpan{a.lo, a.hi, int32(k)})
	}
	ix.sortSpans()
	return ix
}

// unitOf returns the unit holding info offset off, -1 for none.
func (ix *dwarfIndex) unitOf(off uint64) int {
	i := sort.Search(len(ix.hdrs), func(i int) bool { return ix.hdrs[i].off > off }) - 1
	if i < 0 || off >= ix.hdrs[i].end {
		return -1
	}
	return i
}

// enable makes sure the units k are in ix.d, making it again if not.
func (ix *dwarfIndex) enable(ks ...int) error {
	if ix.hdrs == nil {
		return nil // every unit is in ix.d
	}
	more := false
	for _, k := range ks {
		if k >= 0 && !ix.enabled[k] {
			ix.enabled[k] = true
			more = true
		}
	}
	if !more && ix.d != nil {
		return nil
	}
	return ix.remake()
}

// remake patches the abbreviation offsets of the units not enabled to the
// table of the first enabled unit, and makes dwarf.Data again.
func (ix *dwarfIndex) remake() error {
	info := ix.ds.dat["info"]
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
	d, err := ix.ds.data()
	if err != nil {
		return err
	}
	ix.d, ix.r = d, d.Reader()
	return nil
}

// readAll turns an aranges index into one that read every unit's entry:
// for PCs .debug_aranges does not cover.
func (ix *dwarfIndex) readAll() error {
	for k := range ix.enabled {
		ix.enabled[k] = true
	}
	if err := ix.remake(); err != nil {
		return err
	}
	ix.hdrs, ix.enabled = nil, nil
	full, err := newIndex(ix.d)
	// Units already read stay; the address table is the full one.
	byOff := map[dwarf.Offset]*unitIndex{}
	for _, u := range ix.units {
		byOff[u.off] = u
	}
	for i, u := range full.units {
		if old, ok := byOff[u.off]; ok {
			full.units[i] = old
		}
	}
	ix.units, ix.spans, ix.maxHi, ix.loose = full.units, full.spans, full.maxHi, full.loose
	return err
}
