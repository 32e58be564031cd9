package signature

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// trace is one real crash's symbolized crashed-thread frames:
// testdata/traces.json, written by host/collector's TestLabTraces
// (-update-traces) from the fixture programs crashed on x86_64 (host
// kernel cores), aarch64 and arm (qemu-user cores), built by gcc
// (O2-dynamic) and by clang+lld, symbolized with the programs' symbols
// and libc's (the host's libc6-dbg; the cross libcs' .dynsym), and
// without any symbols (-nosymbols).
type trace struct {
	Arch     string  `json:"arch"`
	Variant  string  `json:"variant"`
	Scenario string  `json:"scenario"`
	Frames   []Frame `json:"frames"`
}

func (tr trace) String() string { return tr.Arch + "/" + tr.Variant + "/" + tr.Scenario }

func (tr trace) symbols() bool { return !strings.HasSuffix(tr.Variant, "-nosymbols") }

func traces(t *testing.T) []trace {
	t.Helper()
	b, err := os.ReadFile("testdata/traces.json")
	if err != nil {
		t.Fatal(err)
	}
	var out []trace
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// names is a trace's frames as Name gives them, innermost first.
func names(r *Rules, fs []Frame) string {
	var out []string
	for _, f := range fs {
		n, _ := r.Name(f)
		out = append(out, n)
	}
	return strings.Join(out, " < ")
}

// Every real trace with symbols gets its bug's signature, on every
// architecture and in both builds: the signature does not depend on
// build ids, addresses, compilers or whether libc had symbols.
func TestRealTraces(t *testing.T) {
	want := map[string]string{
		"nullwrite":   "null_write",
		"threads":     "null_write",
		"alloca":      "null_write",
		"sighandler":  "null_write",
		"sigaltstack": "null_write",
		"abort":       "ab2",
		"raise":       "rs2",
		"nullfn":      "@0x0 | nf2",
		"memcpy":      "libc.so.6 | mc2",
		"recursion":   "recurse",
		"throw":       "thrower",
	}
	r := Default()
	n := 0
	for _, tr := range traces(t) {
		if !tr.symbols() {
			continue
		}
		n++
		got := r.Of(tr.Frames)
		if got.Text != want[tr.Scenario] || !got.Symbolized {
			t.Errorf("%s: %q (symbolized %v), want %q\n  frames: %s", tr, got.Text, got.Symbolized, want[tr.Scenario], names(r, tr.Frames))
		}
	}
	if n < 60 {
		t.Fatalf("%d traces with symbols", n)
	}
}

// The skip list: abort's and raise's machinery (glibc's
// __pthread_kill_implementation, __pthread_kill_internal, raise or its
// alias gsignal, abort) and a C++ throw's (std::terminate, __cxa_throw,
// __gnu_cxx::__verbose_terminate_handler) go, whatever names libc had.
func TestSkipMachinery(t *testing.T) {
	r := Default()
	for _, tr := range traces(t) {
		if !tr.symbols() || (tr.Scenario != "abort" && tr.Scenario != "throw") {
			continue
		}
		var fns []string
		for _, f := range tr.Frames {
			fns = append(fns, f.Function)
		}
		text := strings.Join(fns, " < ")
		if !strings.Contains(text, "abort") || (tr.Scenario == "throw" && !strings.Contains(text, "__cxa_throw")) {
			t.Errorf("%s: the trace lacks its machinery: %s", tr, text)
		}
		got := r.Of(tr.Frames).Text
		if strings.Contains(got, "abort") || strings.Contains(got, "libc") || strings.Contains(got, "terminate") {
			t.Errorf("%s: %q keeps machinery", tr, got)
		}
	}
	// Without the skip list, the crash site is libc's.
	bare := &Rules{Prefix: r.Prefix, System: r.System, Normalize: r.Normalize}
	for _, tr := range traces(t) {
		if tr.symbols() && tr.Scenario == "abort" {
			if got := bare.Of(tr.Frames).Text; !strings.HasPrefix(got, "libc.so.6") {
				t.Errorf("%s without skip rules: %q", tr, got)
			}
		}
	}
}

// The system list: a crash inside libc's memcpy (or the memset clang
// made of it) is named by the library and its caller, on every
// architecture, with libc's symbols (x86_64: __memcpy_avx512_unaligned_erms),
// with .dynsym only, and without any.
func TestSystemLibraryIsPrefix(t *testing.T) {
	r := Default()
	fns := map[string]bool{}
	for _, tr := range traces(t) {
		if tr.Scenario != "memcpy" {
			continue
		}
		fns[tr.Frames[0].Function] = true
		got := r.Of(tr.Frames)
		want := "libc.so.6 | mc2"
		if !tr.symbols() {
			want = "libc.so.6 | crash+0x"
		}
		if !strings.HasPrefix(got.Text, want) {
			t.Errorf("%s: %q, want %q", tr, got.Text, want)
		}
	}
	if len(fns) < 3 {
		t.Errorf("the real traces name libc's frame in fewer ways than expected: %v", fns)
	}
}

// The prefix list: a project's helper added as a prefix keeps its caller.
func TestPrefixKeepsCaller(t *testing.T) {
	extra, err := Parse([]byte(`prefix = ['^null_write$']`))
	if err != nil {
		t.Fatal(err)
	}
	r := Default().Extend(extra)
	want := map[string]string{
		"nullwrite": "null_write | nw3", "threads": "null_write | nw3",
		"sighandler": "null_write | in_handler2", "sigaltstack": "null_write | in_handler2",
		"alloca": "null_write | vla",
	}
	for _, tr := range traces(t) {
		if w, ok := want[tr.Scenario]; ok && tr.symbols() {
			if got := r.Of(tr.Frames).Text; got != w {
				t.Errorf("%s: %q, want %q", tr, got, w)
			}
		}
	}
	// The built-in prefixes: the allocator and string functions.
	for _, fn := range []string{"malloc", "free", "_int_free", "memcpy", "__memmove_avx_unaligned_erms", "strlen", "__strlen_generic", "operator new", "operator delete[]"} {
		n := Default().NormalizeName(fn)
		if !matchAny(Default().Prefix, n) {
			t.Errorf("%s (%s) is not a prefix frame", fn, n)
		}
	}
	for _, fn := range []string{"strange_function", "memory_pool_init", "main", "string_parse"} {
		if matchAny(Default().Prefix, fn) {
			t.Errorf("%s is a prefix frame", fn)
		}
	}
}

// No symbol: module plus offset, flagged as not symbolized; a call
// through NULL is @0x0 and its caller, and stays symbolized.
func TestFallbacks(t *testing.T) {
	r := Default()
	for _, tr := range traces(t) {
		got := r.Of(tr.Frames)
		switch {
		case tr.Scenario == "nullfn":
			if !strings.HasPrefix(got.Text, "@0x0 | ") || got.Symbolized != tr.symbols() {
				t.Errorf("%s: %+v", tr, got)
			}
		case !tr.symbols():
			if !strings.Contains(got.Text, "+0x") || got.Symbolized {
				t.Errorf("%s: %+v, want module+offset, not symbolized", tr, got)
			}
		}
	}
	if n, has := r.Name(Frame{Withheld: true}); n != "(withheld)" || has {
		t.Error(n)
	}
	if n, _ := r.Name(Frame{PC: 0x7fff0000}); n != "(no module)" {
		t.Error(n)
	}
	if got := r.Of(nil).Text; got != "(no frames)" {
		t.Error(got)
	}
}

// Normalization: argument lists, template arguments, clones, Rust
// hashes, symbol versions.
func TestNormalize(t *testing.T) {
	r := Default()
	for in, want := range map[string]string{
		"thrower(int)":               "thrower",
		"thrower(int) [clone .cold]": "thrower",
		"parse_header.constprop.0":   "parse_header",
		"parse_header.isra.0.cold":   "parse_header",
		"parse_header.part.3":        "parse_header",
		"ns::Conn::send(std::span<char const, 18446744073709551615ul>) const":                                                                                            "ns::Conn::send",
		"std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&)": "std::vector<T>::_M_realloc_insert<T>",
		"std::operator<< <std::char_traits<char> >(std::basic_ostream<char, std::char_traits<char> >&, char const*)":                                                     "std::operator<< <T>",
		"bool std::operator< <int>(int const&, int const&)":                                                                                                              "bool std::operator< <T>",
		"Foo::operator()(int) const":                               "Foo::operator()",
		"(anonymous namespace)::worker(void*)":                     "(anonymous namespace)::worker",
		"app::main::h0123456789abcdef":                             "app::main",
		"<app::Foo as core::fmt::Display>::fmt::h0123456789abcdef": "<T>::fmt",
		"memcpy@@GLIBC_2.14":                                       "memcpy",
		"abort@plt":                                                "abort",
		"__memcpy_avx512_unaligned_erms":                           "memcpy",
		"__strlen_generic":                                         "strlen",
		"__memcpy_aarch64_simd":                                    "memcpy",
	} {
		if got := r.NormalizeName(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// The rules file: unknown keys and bad expressions are errors that name
// the entry.
func TestParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		`skip = ['(']`:                   "skip[0]",
		`prefix = ['ok', '[z-a]']`:       "prefix[1]",
		`prefixes = ['x']`:               "unknown key",
		"[[normalize]]\npattern = '('\n": "normalize[0]",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
