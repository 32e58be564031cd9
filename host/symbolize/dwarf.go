package symbolize

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"io"
	"sort"
)

// lineRow maps [addr, end) to a source position.
type lineRow struct {
	addr, end uint64
	file      int32 // index into dwarfIndex.files
	line      int32
	col       int32
}

// scope is a function (DW_TAG_subprogram) or an inlined call
// (DW_TAG_inlined_subroutine) with its address ranges.
type scope struct {
	ranges   [][2]uint64
	origin   dwarf.Offset // where its name is: itself, or its abstract origin
	parent   int32        // enclosing scope, -1 for a subprogram
	children []int32      // inlined calls directly inside
	callFile int32        // inlined: the caller's position
	callLine int32
	callCol  int32
	// mangled: the unit's language mangles names (C++, Rust); its
	// functions without DW_AT_linkage_name take their symbol's name.
	mangled bool
}

type nameInfo struct {
	name, linkage string
	ref           dwarf.Offset // DW_AT_abstract_origin or DW_AT_specification
}

// dwarfIndex answers PCs from one debug file, reading only the
// compilation units that hold them. Opening it reads each unit's first
// entry (DW_TAG_compile_unit: its DW_AT_ranges or low_pc/high_pc) into an
// address table; a unit's line program and function tree are read the
// first time a PC falls in it. Names of abstract origins and
// specifications, which may be in other units, are read one entry at a
// time through Reader.Seek.
type dwarfIndex struct {
	d       *dwarf.Data
	r       *dwarf.Reader // for names: Seek to one entry
	units   []*unitIndex
	spans   []unitSpan // sorted by lo
	maxHi   []uint64   // maxHi[i]: the largest hi of spans[:i+1]
	loose   []int32    // units with a line program but no address ranges
	files   []string
	fileIdx map[string]int32
	names   map[dwarf.Offset]nameInfo
	entries int // DIEs read so far, bounded by maxEntries

	// With .debug_aranges (units.go): the sections, the unit headers,
	// and which units ix.d has; nil once every unit is in ix.d.
	ds         *dwarfSections
	hdrs       []unitHeader // walked so far, in order
	enabled    []bool       // by header
	byHdr      map[uint64]int32
	lineEnd    uint64            // .debug_line given to dwarf.New
	abbrevEnds map[uint64]uint64 // where the tables at these offsets end
	full       bool              // readAll was tried
}

// unitSpan is one address range of a unit.
type unitSpan struct {
	lo, hi uint64
	unit   int32
}

// unitIndex is one unit's lookup structure, filled on first use: its line
// rows sorted by address (LineReader.SeekPC misses PCs when a unit's
// sequences are not in address order, as with gcc -O2's .text.startup)
// and its function scopes with their inlined calls.
type unitIndex struct {
	off    dwarf.Offset // of its unit entry
	hdr    uint64       // aranges index: the header's offset
	hdrIdx int          // and 1 + its index in dwarfIndex.hdrs, once walked
	loaded bool
	err    error
	rows   []lineRow
	scopes []scope
	tops   []topRange // subprogram ranges, sorted by lo
}

type topRange struct {
	lo, hi uint64
	scope  int32
}

// DW_AT_linkage_name (DWARF 4+) and the older DW_AT_MIPS_linkage_name,
// which debug/dwarf names only by number.
const (
	attrLinkageName     = dwarf.Attr(0x6e)
	attrMIPSLinkageName = dwarf.Attr(0x2007)
)

// Bounds on what one file may make us keep.
const (
	maxEntries = 50_000_000
	maxUnits   = 10_000_000
)

// newIndex reads the unit address table. A malformed unit header ends the
// walk with an error; the units read before stay usable.
func newIndex(d *dwarf.Data) (ix *dwarfIndex, err error) {
	ix = &dwarfIndex{d: d, r: d.Reader(), fileIdx: map[string]int32{}, names: map[dwarf.Offset]nameInfo{}}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed DWARF: %v", p)
		}
		ix.sortSpans()
	}()
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return ix, err
		}
		if e == nil {
			return ix, nil
		}
		if len(ix.units) >= maxUnits {
			return ix, errors.New("too many DWARF units")
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			ix.addUnit(e, nil)
		}
		// On a unit's entry this moves to the next unit without
		// reading the children.
		r.SkipChildren()
	}
}

// addUnit records a unit and its ranges (from the unit entry, or given,
// as read from the on-disk index).
func (ix *dwarfIndex) addUnit(e *dwarf.Entry, ranges [][2]uint64) {
	u := int32(len(ix.units))
	ix.units = append(ix.units, &unitIndex{off: e.Offset})
	if ranges == nil {
		ranges, _ = ix.d.Ranges(e)
	}
	n := 0
	for _, rg := range ranges {
		if rg[1] > rg[0] {
			ix.spans = append(ix.spans, unitSpan{rg[0], rg[1], u})
			n++
		}
	}
	if n == 0 && e.Val(dwarf.AttrStmtList) != nil {
		ix.loose = append(ix.loose, u)
	}
}

func (ix *dwarfIndex) sortSpans() {
	sort.Slice(ix.spans, func(i, j int) bool { return ix.spans[i].lo < ix.spans[j].lo })
	ix.maxHi = make([]uint64, len(ix.spans))
	var m uint64
	for i, s := range ix.spans {
		if s.hi > m {
			m = s.hi
		}
		ix.maxHi[i] = m
	}
}

func (ix *dwarfIndex) intern(name string) int32 {
	if i, ok := ix.fileIdx[name]; ok {
		return i
	}
	i := int32(len(ix.files))
	ix.files = append(ix.files, name)
	ix.fileIdx[name] = i
	return i
}

// unitsAt returns the units whose ranges hold addr, in address order.
func (ix *dwarfIndex) unitsAt(addr uint64) []int32 {
	var out []int32
	i := sort.Search(len(ix.spans), func(i int) bool { return ix.spans[i].lo > addr }) - 1
	for ; i >= 0 && ix.maxHi[i] > addr && len(out) < 64; i-- {
		if addr < ix.spans[i].hi {
			out = append(out, ix.spans[i].unit)
		}
	}
	return out
}

// find returns the line row and the scope chain (innermost first) of
// addr, and the unit they are in.
func (ix *dwarfIndex) find(addr uint64) (u *unitIndex, row lineRow, hasLine bool, chain []int32) {
	try := func(k int32) bool {
		u = ix.unit(k)
		row, hasLine = u.line(addr)
		chain = u.chain(addr)
		return hasLine || len(chain) > 0
	}
	for _, k := range ix.unitsAt(addr) {
		if ix.byHdr != nil && ix.enableUnit(k) != nil {
			continue
		}
		if try(k) {
			return
		}
	}
	if ix.byHdr != nil && !ix.full {
		// Not in .debug_aranges: read every unit's entry, and look again.
		ix.full = true
		if ix.readAll() == nil {
			return ix.find(addr)
		}
	}
	// Units without ranges (rare: some assembler output) are read only
	// when no unit claims addr.
	for _, k := range ix.loose {
		if try(k) {
			return
		}
	}
	return nil, lineRow{}, false, nil
}

// unit returns unit k, reading it on first use.
func (ix *dwarfIndex) unit(k int32) *unitIndex {
	u := ix.units[k]
	if !u.loaded {
		u.loaded = true
		u.err = ix.load(u)
		u.finish()
	}
	return u
}

// load reads one unit's line program and function tree. Malformed parts
// end the walk with an error; what was read before stays usable.
func (ix *dwarfIndex) load(u *unitIndex) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed DWARF: %v", p)
		}
	}()
	d := ix.d
	r := d.Reader()
	r.Seek(u.off)
	cu, err := r.Next()
	if err != nil || cu == nil {
		return err
	}
	mangled := false
	lang, _ := cu.Val(dwarf.AttrLanguage).(int64)
	switch lang {
	case 0x04, 0x19, 0x1a, 0x21, 0x1c: // C++, C++03, C++11, C++14, Rust
		mangled = true
	}
	var cuFiles []int32 // the unit's file table, interned
	if lr, err := d.LineReader(cu); err == nil && lr != nil {
		u.readLines(lr, ix.intern)
		for _, f := range lr.Files() {
			if f == nil {
				cuFiles = append(cuFiles, -1)
			} else {
				cuFiles = append(cuFiles, ix.intern(f.Name))
			}
		}
	}
	if !cu.Children {
		return nil
	}
	stack := []int32{-1}
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		if ix.entries++; ix.entries > maxEntries {
			return errors.New("too many DWARF entries")
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		parent := stack[len(stack)-1]
		cur := parent
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			return nil // the next unit: this one had no terminator
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			ni := entryName(e)
			ix.names[e.Offset] = ni
			ranges, _ := d.Ranges(e)
			if len(ranges) == 0 || e.Tag == dwarf.TagInlinedSubroutine && parent < 0 {
				break // a declaration or an abstract instance
			}
			s := scope{ranges: ranges, origin: e.Offset, parent: -1, callFile: -1, mangled: mangled}
			if e.Tag == dwarf.TagInlinedSubroutine {
				s.parent = parent
				if cf, ok := e.Val(dwarf.AttrCallFile).(int64); ok && cf >= 0 && cf < int64(len(cuFiles)) {
					s.callFile = cuFiles[cf]
				}
				if cl, ok := e.Val(dwarf.AttrCallLine).(int64); ok {
					s.callLine = int32(cl)
				}
				if cc, ok := e.Val(dwarf.AttrCallColumn).(int64); ok {
					s.callCol = int32(cc)
				}
			}
			cur = int32(len(u.scopes))
			u.scopes = append(u.scopes, s)
			if s.parent >= 0 {
				u.scopes[s.parent].children = append(u.scopes[s.parent].children, cur)
			} else {
				for _, rg := range ranges {
					if rg[1] > rg[0] {
						u.tops = append(u.tops, topRange{rg[0], rg[1], cur})
					}
				}
			}
		}
		if e.Children {
			stack = append(stack, cur)
		}
	}
	return nil
}

func entryName(e *dwarf.Entry) nameInfo {
	ni := nameInfo{}
	ni.name, _ = e.Val(dwarf.AttrName).(string)
	ni.linkage, _ = e.Val(attrLinkageName).(string)
	if ni.linkage == "" {
		ni.linkage, _ = e.Val(attrMIPSLinkageName).(string)
	}
	if o, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
		ni.ref = o
	} else if o, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok {
		ni.ref = o
	}
	return ni
}

func (u *unitIndex) readLines(lr *dwarf.LineReader, intern func(string) int32) {
	var le dwarf.LineEntry
	prev := -1
	for {
		if err := lr.Next(&le); err != nil {
			if err != io.EOF {
				u.rows = u.rows[:0] // drop a broken unit's partial rows
			}
			return
		}
		if prev >= 0 {
			if le.Address >= u.rows[prev].addr {
				u.rows[prev].end = le.Address
			}
			prev = -1
		}
		if le.EndSequence {
			continue
		}
		f := int32(-1)
		if le.File != nil {
			f = intern(le.File.Name)
		}
		u.rows = append(u.rows, lineRow{addr: le.Address, file: f, line: int32(le.Line), col: int32(le.Column)})
		prev = len(u.rows) - 1
	}
}

func (u *unitIndex) finish() {
	// Empty rows (several rows at one address: the last one holds) go.
	rows := u.rows[:0]
	for _, r := range u.rows {
		if r.end > r.addr {
			rows = append(rows, r)
		}
	}
	u.rows = rows
	sort.SliceStable(u.rows, func(i, j int) bool { return u.rows[i].addr < u.rows[j].addr })
	sort.SliceStable(u.tops, func(i, j int) bool { return u.tops[i].lo < u.tops[j].lo })
}

// line returns the row holding addr.
func (u *unitIndex) line(addr uint64) (lineRow, bool) {
	i := sort.Search(len(u.rows), func(i int) bool { return u.rows[i].addr > addr }) - 1
	// Overlapping sequences (discarded sections relocated to 0) are rare:
	// look back a little for one that holds addr.
	for k := 0; i >= 0 && k < 8; i, k = i-1, k+1 {
		if r := u.rows[i]; addr < r.end {
			return r, true
		}
	}
	return lineRow{}, false
}

func (s *scope) low() uint64 {
	lo := s.ranges[0][0]
	for _, r := range s.ranges {
		if r[0] < lo {
			lo = r[0]
		}
	}
	return lo
}

func (s *scope) contains(addr uint64) bool {
	for _, r := range s.ranges {
		if addr >= r[0] && addr < r[1] {
			return true
		}
	}
	return false
}

// chain returns the scopes holding addr, innermost first; the last one is
// the subprogram.
func (u *unitIndex) chain(addr uint64) []int32 {
	i := sort.Search(len(u.tops), func(i int) bool { return u.tops[i].lo > addr }) - 1
	top := int32(-1)
	for k := 0; i >= 0 && k < 64; i, k = i-1, k+1 {
		if t := u.tops[i]; addr < t.hi {
			top = t.scope
			break
		}
	}
	if top < 0 {
		return nil
	}
	out := []int32{top}
	for cur := top; ; {
		next := int32(-1)
		for _, c := range u.scopes[cur].children {
			if u.scopes[c].contains(addr) {
				next = c
				break
			}
		}
		if next < 0 || len(out) > 256 {
			break
		}
		out = append(out, next)
		cur = next
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// entry returns the names of the entry at off, reading it when no loaded
// unit had it.
func (ix *dwarfIndex) entry(off dwarf.Offset) (ni nameInfo, ok bool) {
	if ni, ok := ix.names[off]; ok {
		return ni, true
	}
	defer func() {
		if p := recover(); p != nil {
			ok = false
		}
	}()
	if ix.byHdr != nil && ix.enableAt(uint64(off)) != nil {
		return nameInfo{}, false
	}
	ix.r.Seek(off)
	e, err := ix.r.Next()
	if err != nil || e == nil || e.Offset != off {
		return nameInfo{}, false
	}
	ni = entryName(e)
	ix.names[off] = ni
	return ni, true
}

// name resolves a scope's name through abstract origins and
// specifications; the linkage name (to demangle) wins over the plain name.
func (ix *dwarfIndex) name(off dwarf.Offset) (name, linkage string) {
	for depth := 0; depth < 16; depth++ {
		ni, ok := ix.entry(off)
		if !ok {
			break
		}
		if linkage == "" {
			linkage = ni.linkage
		}
		if name == "" {
			name = ni.name
		}
		if linkage != "" && name != "" || ni.ref == 0 {
			break
		}
		off = ni.ref
	}
	return name, linkage
}

func (ix *dwarfIndex) file(i int32) string {
	if i < 0 || int(i) >= len(ix.files) {
		return ""
	}
	return ix.files[i]
}
