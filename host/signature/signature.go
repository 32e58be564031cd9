// Package signature names a crash by the functions it happened in, so that
// reports of one bug share a name across boards, builds and releases: the
// collector groups reports by signature and signal.
//
// The rules are data (rules.toml, overridable): a skip list of frames that
// never name a bug (abort, raise, signal trampolines), a prefix list of
// frames too general to name one alone (malloc, memcpy), whose caller is
// kept as well, and rewrites that normalize names (clone suffixes, Rust
// hashes). Argument lists and template arguments are always dropped. A
// frame without a symbol falls back to its module's base name and file
// offset. docs/signature.md describes the rules with real traces.
//
// This package runs on the host only; the handler never imports it.
package signature

import (
	_ "embed"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/unwound-dev/unwound/host/symbolize"
)

//go:embed rules.toml
var defaultRules []byte

// Sep separates the frames of a signature, as Socorro writes them.
const Sep = " | "

// MaxFrames bounds the frames of one signature: a chain of prefix frames
// (memcpy called from a string helper called from …) ends there.
const MaxFrames = 8

// Rules are the signature rules: what to skip, what to keep going past,
// how to normalize names.
type Rules struct {
	Skip      []*regexp.Regexp // function names
	Prefix    []*regexp.Regexp // function names
	System    []*regexp.Regexp // module base names
	Normalize []Rewrite
}

// Rewrite replaces every match of Pattern in a function name with Replace
// (regexp.ReplaceAllString syntax).
type Rewrite struct {
	Pattern *regexp.Regexp
	Replace string
}

// file is the TOML form of Rules.
type file struct {
	Skip      []string `toml:"skip"`
	Prefix    []string `toml:"prefix"`
	System    []string `toml:"system"`
	Normalize []struct {
		Pattern string `toml:"pattern"`
		Replace string `toml:"replace"`
	} `toml:"normalize"`
}

// Default returns the built-in rules (rules.toml).
func Default() *Rules {
	r, err := Parse(defaultRules)
	if err != nil {
		panic("signature: built-in rules: " + err.Error())
	}
	return r
}

// Parse reads rules in the TOML form of rules.toml. Unknown keys and bad
// regular expressions are errors naming the entry.
func Parse(b []byte) (*Rules, error) {
	var f file
	md, err := toml.Decode(string(b), &f)
	if err != nil {
		return nil, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("unknown key %q", und[0].String())
	}
	r := &Rules{}
	compile := func(list string, i int, s string) (*regexp.Regexp, error) {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d] %q: %w", list, i, s, err)
		}
		return re, nil
	}
	for _, l := range []struct {
		name string
		src  []string
		dst  *[]*regexp.Regexp
	}{{"skip", f.Skip, &r.Skip}, {"prefix", f.Prefix, &r.Prefix}, {"system", f.System, &r.System}} {
		for i, s := range l.src {
			re, err := compile(l.name, i, s)
			if err != nil {
				return nil, err
			}
			*l.dst = append(*l.dst, re)
		}
	}
	for i, n := range f.Normalize {
		re, err := compile("normalize", i, n.Pattern)
		if err != nil {
			return nil, err
		}
		r.Normalize = append(r.Normalize, Rewrite{re, n.Replace})
	}
	return r, nil
}

// Extend returns r with other's lists appended: a project's own rules
// (its helpers as prefix frames, its abort wrappers as skipped ones) on
// top of the defaults.
func (r *Rules) Extend(other *Rules) *Rules {
	return &Rules{
		Skip:      append(append([]*regexp.Regexp{}, r.Skip...), other.Skip...),
		Prefix:    append(append([]*regexp.Regexp{}, r.Prefix...), other.Prefix...),
		System:    append(append([]*regexp.Regexp{}, r.System...), other.System...),
		Normalize: append(append([]Rewrite{}, r.Normalize...), other.Normalize...),
	}
}

// Frame is what a signature needs of one frame.
type Frame struct {
	Function string `json:"function,omitempty"` // the symbolized function (demangled), "" when unknown
	Module   string `json:"module,omitempty"`   // the module's path, "" when the PC is in none
	Offset   uint64 `json:"offset,omitempty"`   // the PC's file address in the module
	PC       uint64 `json:"pc,omitempty"`
	Withheld bool   `json:"withheld,omitempty"` // the handler withheld a wild PC
}

// Signature is a crash's name.
type Signature struct {
	Text string `json:"signature"`
	// Symbolized: every frame the signature names had a symbol. A
	// signature that is not falls back to module+offset somewhere and
	// changes when symbols arrive.
	Symbolized bool `json:"symbolized"`
}

// Of returns the signature of a crashed thread's frames, innermost first.
//
// A frame in a system library (the C library, the C++ runtime, the
// vDSO: the System list) is named by its library, symbols or not, and
// never ends a signature: the program that called it names the bug, and
// a trace names libc's frames differently with and without libc's
// symbols, on every architecture, and in every build (memcpy on one,
// __memcpy_avx_unaligned_erms or memset on another).
//
// First, a leading run of skip frames and system-library frames is
// dropped when it holds a skip frame (the machinery of abort, raise, a
// C++ throw). Then skip frames are dropped, prefix and system-library
// frames kept together with their caller, and the first frame that is
// neither ends the signature.
func (r *Rules) Of(frames []Frame) Signature {
	lead, skipped := 0, false
	for ; lead < len(frames); lead++ {
		f := frames[lead]
		if r.skip(f) {
			skipped = true
			continue
		}
		if r.system(f) {
			continue
		}
		break
	}
	if skipped {
		frames = frames[lead:]
	}
	var parts []string
	sym := true
	for _, f := range frames {
		if r.skip(f) {
			continue
		}
		name, has := r.Name(f)
		sys := r.system(f)
		if sys && len(parts) > 0 && parts[len(parts)-1] == name {
			continue // libc.so.6 | libc.so.6: one library, said once
		}
		parts = append(parts, name)
		// A system frame is named by its library either way, and no
		// symbol can name a PC outside every module.
		sym = sym && (has || sys || f.Module == "")
		if !sys && !matchAny(r.Prefix, name) || len(parts) == MaxFrames {
			break
		}
	}
	if len(parts) == 0 {
		return Signature{Text: "(no frames)", Symbolized: false}
	}
	return Signature{Text: strings.Join(parts, Sep), Symbolized: sym}
}

// skip reports whether a frame's function is on the skip list.
func (r *Rules) skip(f Frame) bool {
	if f.Function == "" {
		return false
	}
	return matchAny(r.Skip, r.NormalizeName(f.Function))
}

// system reports whether a frame is in a system library.
func (r *Rules) system(f Frame) bool {
	return f.Module != "" && matchAny(r.System, moduleBase(f.Module))
}

func moduleBase(p string) string {
	return path.Base(strings.TrimSuffix(p, " (deleted)"))
}

// Name is a frame's name in a signature and whether it came from a
// symbol: the library's base name for a frame in a system library
// (libc.so.6), else the normalized function, else "module+0xoffset",
// else "@0xPC" for a PC below the first page (a call through a NULL
// pointer), "(withheld)" or "(no module)".
func (r *Rules) Name(f Frame) (string, bool) {
	if f.Module != "" && r.system(f) {
		return moduleBase(f.Module), f.Function != ""
	}
	if f.Function != "" {
		if n := r.NormalizeName(f.Function); n != "" {
			return n, true
		}
	}
	switch {
	case f.Withheld:
		return "(withheld)", false
	case f.Module != "":
		return fmt.Sprintf("%s+%#x", moduleBase(f.Module), f.Offset), false
	case f.PC < 4096:
		return fmt.Sprintf("@%#x", f.PC), false
	}
	return "(no module)", false
}

// NormalizeName drops a demangled name's argument list, its template
// arguments (to <T>) and a trailing const, then applies the rules'
// rewrites.
func (r *Rules) NormalizeName(s string) string {
	s = strings.TrimSpace(s)
	s = dropArgs(s)
	s = collapseTemplates(s)
	for _, n := range r.Normalize {
		s = n.Pattern.ReplaceAllString(s, n.Replace)
	}
	return strings.TrimSpace(s)
}

func matchAny(list []*regexp.Regexp, s string) bool {
	for _, re := range list {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// dropArgs removes a trailing balanced argument list, and the const,
// volatile, & and && qualifiers after it: "ns::f(int, char*) const" is
// "ns::f", "S::operator()(int)" is "S::operator()".
func dropArgs(s string) string {
	for {
		t := strings.TrimSpace(s)
		for _, q := range []string{" const", " volatile", " &&", " &"} {
			t = strings.TrimSuffix(t, q)
		}
		if t == s {
			break
		}
		s = t
	}
	// A clone suffix follows the arguments: f(int) [clone .cold].
	tail := ""
	if i := strings.Index(s, " [clone "); i >= 0 {
		s, tail = s[:i], s[i:]
	}
	if !strings.HasSuffix(s, ")") || strings.HasSuffix(s, "operator()") {
		return s + tail
	}
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				if i == 0 {
					return s + tail // "(anonymous namespace)": not arguments
				}
				return strings.TrimSpace(s[:i]) + tail
			}
		}
	}
	return s + tail
}

// operators whose names hold angle brackets that are not template ones.
var angleOperators = []string{"operator<=>", "operator<<=", "operator>>=", "operator<<", "operator>>", "operator<=", "operator>=", "operator->*", "operator->", "operator<", "operator>"}

// collapseTemplates replaces every outermost template argument list with
// <T>: "std::vector<int, std::allocator<int> >::push_back" is
// "std::vector<T>::push_back". Instantiations of one template share a
// bug.
func collapseTemplates(s string) string {
	if !strings.Contains(s, "<") {
		return s
	}
	var b strings.Builder
	depth := 0
	for i := 0; i < len(s); {
		if depth == 0 {
			if op := operatorAt(s, i); op != "" {
				b.WriteString(op)
				i += len(op)
				continue
			}
		}
		c := s[i]
		switch {
		case c == '<':
			if depth == 0 {
				b.WriteString("<T>")
			}
			depth++
		case c == '>' && depth > 0:
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
		i++
	}
	if depth != 0 {
		return s // unbalanced: leave it as it was
	}
	return b.String()
}

func operatorAt(s string, i int) string {
	for _, op := range angleOperators {
		if strings.HasPrefix(s[i:], op) {
			return op
		}
	}
	return ""
}

// Frames returns the crashed thread's frames of a symbolized report, in
// the form Of takes; nil when no thread crashed. Each frame is named by
// the function its code belongs to (the outermost of its inlined
// locations): what every symbol source (DWARF, .symtab, .dynsym) agrees
// on, so that a report symbolized from a symbol table alone groups with
// one symbolized from DWARF.
func Frames(res *symbolize.Result) []Frame {
	if res == nil {
		return nil
	}
	for _, t := range res.Threads {
		if !t.Crashed {
			continue
		}
		out := make([]Frame, 0, len(t.Frames))
		for _, f := range t.Frames {
			fr := Frame{PC: uint64(f.PC), Withheld: f.Withheld}
			if f.Module >= 0 && f.Module < len(res.Report.Modules) {
				m := res.Report.Modules[f.Module]
				fr.Module = m.Path
				fr.Offset = m.FileAddr(f.PC)
				if f.Addr != nil {
					fr.Offset = uint64(*f.Addr)
				}
			}
			if n := len(f.Locations); n > 0 {
				fr.Function = f.Locations[n-1].Function
			}
			out = append(out, fr)
		}
		return out
	}
	return nil
}
