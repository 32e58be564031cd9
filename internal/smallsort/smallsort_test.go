package smallsort

import (
	"sort"
	"testing"
)

func FuzzStrings(f *testing.F) {
	f.Add("b a c", "")
	f.Add("", "x")
	f.Add("same same", "a")
	f.Fuzz(func(t *testing.T, a, b string) {
		s := []string{a, b, a + b, b + a, "", a}
		want := append([]string(nil), s...)
		sort.Strings(want)
		Strings(s)
		for i := range s {
			if s[i] != want[i] {
				t.Fatalf("got %q, want %q", s, want)
			}
		}
	})
}
