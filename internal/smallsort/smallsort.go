// Package smallsort sorts the handler's few short lists of strings (drop
// reasons, rate-limit keys) by insertion. sort.Strings would link the
// generic pdqsort instantiated for strings into the handler: about 8 KB
// of code for lists of a handful of entries (docs/design.md, "Footprint").
package smallsort

// Strings sorts s in increasing order. It is quadratic: for short lists.
func Strings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
