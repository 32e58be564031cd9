package signature

import (
	"strings"
	"testing"
)

// FuzzSignature: any function names (they come from a board's files
// through the symbolizer) give a signature without panicking, and the
// normalized name is idempotent.
func FuzzSignature(f *testing.F) {
	for _, s := range []string{
		"thrower(int) [clone .cold]", "std::vector<int>::push_back(int const&)", "operator<<", "a<<b>",
		"(anonymous namespace)::f()", "x::h0123456789abcdef", "<<<", ">>>", "f(((", "))", "",
	} {
		f.Add(s, "libc.so.6", uint64(0x1234))
	}
	r := Default()
	f.Fuzz(func(t *testing.T, fn, module string, off uint64) {
		n := r.NormalizeName(fn)
		if m := r.NormalizeName(n); m != n && !strings.Contains(fn, "<") {
			t.Errorf("%q: %q then %q", fn, n, m)
		}
		r.Of([]Frame{{Function: fn, Module: module, Offset: off}, {Function: "main", Module: "/bin/x"}})
	})
}

// FuzzParse: a rules file never panics the parser.
func FuzzParse(f *testing.F) {
	f.Add(string(defaultRules))
	f.Add("skip = ['(']")
	f.Add("[[normalize]]\npattern = 'a'\nreplace = '$1'\n")
	f.Fuzz(func(t *testing.T, s string) {
		Parse([]byte(s))
	})
}
