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

// dwarfIndex is the lookup structure for one debug file: all line rows of
// all units sorted by address (LineReader.SeekPC misses PCs when a unit's
// sequences are not in address order, as with gcc -O2's .text.startup),
// and function scopes with their inlined calls.
type dwarfIndex struct {
	files  []string
	rows   []lineRow
	scopes []scope
	tops   []topRange // subprogram ranges, sorted by lo
	names  map[dwarf.Offset]nameInfo
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

// maxEntries bounds how many DIEs one file may make us keep.
const maxEntries = 50_000_000

// buildIndex reads every unit's line table and function tree. Malformed
// parts end the walk with an error; what was read before stays usable.
func buildIndex(d *dwarf.Data) (ix *dwarfIndex, err error) {
	ix = &dwarfIndex{names: map[dwarf.Offset]nameInfo{}}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed DWARF: %v", p)
		}
		ix.finish()
	}()
	fileIdx := map[string]int32{}
	intern := func(name string) int32 {
		if i, ok := fileIdx[name]; ok {
			return i
		}
		i := int32(len(ix.files))
		ix.files = append(ix.files, name)
		fileIdx[name] = i
		return i
	}
	r := d.Reader()
	var cuFiles []int32 // the current unit's file table, interned
	mangled := false
	type open struct{ scope int32 }
	var stack []open
	n := 0
	for {
		e, err := r.Next()
		if err != nil {
			return ix, err
		}
		if e == nil {
			break
		}
		if n++; n > maxEntries {
			return ix, errors.New("too many DWARF entries")
		}
		if e.Tag == 0 {
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		parent := int32(-1)
		if len(stack) > 0 {
			parent = stack[len(stack)-1].scope
		}
		cur := parent
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			stack = stack[:0]
			parent, cur = -1, -1
			cuFiles = cuFiles[:0]
			lang, _ := e.Val(dwarf.AttrLanguage).(int64)
			switch lang {
			case 0x04, 0x19, 0x1a, 0x21, 0x1c: // C++, C++03, C++11, C++14, Rust
				mangled = true
			default:
				mangled = false
			}
			if lr, err := d.LineReader(e); err == nil && lr != nil {
				ix.readLines(lr, intern)
				for _, f := range lr.Files() {
					if f == nil {
						cuFiles = append(cuFiles, -1)
					} else {
						cuFiles = append(cuFiles, intern(f.Name))
					}
				}
			}
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
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
			cur = int32(len(ix.scopes))
			ix.scopes = append(ix.scopes, s)
			if s.parent >= 0 {
				ix.scopes[s.parent].children = append(ix.scopes[s.parent].children, cur)
			} else {
				for _, rg := range ranges {
					if rg[1] > rg[0] {
						ix.tops = append(ix.tops, topRange{rg[0], rg[1], cur})
					}
				}
			}
		default:
			// Declarations referenced by DW_AT_specification carry the
			// names of C++ methods: keep names of anything named.
			if nm, ok := e.Val(dwarf.AttrName).(string); ok && e.Tag != dwarf.TagVariable && e.Tag != dwarf.TagFormalParameter && e.Tag != dwarf.TagMember {
				ni := nameInfo{name: nm}
				ni.linkage, _ = e.Val(attrLinkageName).(string)
				ix.names[e.Offset] = ni
			}
		}
		if e.Children {
			stack = append(stack, open{cur})
		}
	}
	return ix, nil
}

func (ix *dwarfIndex) readLines(lr *dwarf.LineReader, intern func(string) int32) {
	var le dwarf.LineEntry
	prev := -1
	start := len(ix.rows)
	for {
		if err := lr.Next(&le); err != nil {
			if err != io.EOF {
				ix.rows = ix.rows[:start] // drop a broken unit's partial rows
			}
			return
		}
		if prev >= 0 {
			if le.Address >= ix.rows[prev].addr {
				ix.rows[prev].end = le.Address
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
		ix.rows = append(ix.rows, lineRow{addr: le.Address, file: f, line: int32(le.Line), col: int32(le.Column)})
		prev = len(ix.rows) - 1
	}
}

func (ix *dwarfIndex) finish() {
	// Empty rows (several rows at one address: the last one holds) go.
	rows := ix.rows[:0]
	for _, r := range ix.rows {
		if r.end > r.addr {
			rows = append(rows, r)
		}
	}
	ix.rows = rows
	sort.SliceStable(ix.rows, func(i, j int) bool { return ix.rows[i].addr < ix.rows[j].addr })
	sort.SliceStable(ix.tops, func(i, j int) bool { return ix.tops[i].lo < ix.tops[j].lo })
}

// line returns the row holding addr.
func (ix *dwarfIndex) line(addr uint64) (lineRow, bool) {
	i := sort.Search(len(ix.rows), func(i int) bool { return ix.rows[i].addr > addr }) - 1
	// Overlapping sequences (discarded sections relocated to 0) are rare:
	// look back a little for one that holds addr.
	for k := 0; i >= 0 && k < 8; i, k = i-1, k+1 {
		if r := ix.rows[i]; addr < r.end {
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
func (ix *dwarfIndex) chain(addr uint64) []int32 {
	i := sort.Search(len(ix.tops), func(i int) bool { return ix.tops[i].lo > addr }) - 1
	top := int32(-1)
	for k := 0; i >= 0 && k < 64; i, k = i-1, k+1 {
		if t := ix.tops[i]; addr < t.hi {
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
		for _, c := range ix.scopes[cur].children {
			if ix.scopes[c].contains(addr) {
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

// name resolves a scope's name through abstract origins and
// specifications; the linkage name (to demangle) wins over the plain name.
func (ix *dwarfIndex) name(off dwarf.Offset) (name, linkage string) {
	for depth := 0; depth < 16; depth++ {
		ni, ok := ix.names[off]
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
