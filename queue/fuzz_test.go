package queue

import "testing"

// FuzzParseEntry: names come from a directory anyone with access to the
// board can write into. A parsed name prints back to a name that parses
// to the same fields, and never holds a path separator.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{
		"0000000042-1a2b3c4d.json.zst",
		"0000000042-1a2b3c4d-1767225600.json.zst",
		"18446744073709551615-ffffffff.json.zst",
		"18446744073709551616-ffffffff.json.zst",
		"1-00000000-1.json.zst",
		"0000000001-ABCDEF01.json.zst",
		"../0000000001-00000000.json.zst",
		".tmp-00000000-123",
		"0000000001-00000000-0123.json.zst",
		"0000000001-00000000--1.json.zst",
		"+1-00000000.json.zst",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseEntry(s)
		if err != nil {
			return
		}
		if _, ok := ParseName(s); !ok {
			t.Fatalf("ParseEntry accepts %q, ParseName does not", s)
		}
		back := n.String()
		m, err := ParseEntry(back)
		if err != nil || m != n {
			t.Fatalf("%q → %+v → %q → %+v, %v", s, n, back, m, err)
		}
		for _, c := range back {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '.') {
				t.Fatalf("%q: not FAT-safe", back)
			}
		}
		if n.Time < 0 {
			t.Fatalf("%q: negative time", s)
		}
	})
}
