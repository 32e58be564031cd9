package queue

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/unwound-dev/unwound/report"
)

// Name is a parsed entry name:
//
//	0000000042-1a2b3c4d.json.zst             crash time not trusted
//	0000000042-1a2b3c4d-1767225600.json.zst  crash time trusted (unix seconds)
//
// Only digits, lowercase hex and '-': safe on FAT, where ':' and case
// differences are not. The sequence number orders the entries; the boot
// tag and the time are there for max_age and for people reading a listing.
type Name struct {
	Seq  uint64
	Boot string // 8 lowercase hex digits: the first of the boot id
	Time int64  // unix seconds of the crash when the clock was trusted, else 0
}

// String is the file name.
func (n Name) String() string {
	if n.Time > 0 {
		return fmt.Sprintf("%010d-%s-%d%s", n.Seq, n.Boot, n.Time, report.Suffix)
	}
	return fmt.Sprintf("%010d-%s%s", n.Seq, n.Boot, report.Suffix)
}

// ParseEntry parses an entry's file name; anything else (temp files, the
// lock, the quarantine, names with a path) is an error.
func ParseEntry(name string) (Name, error) {
	bad := func(why string) (Name, error) {
		return Name{}, fmt.Errorf("queue: %q is not an entry name: %s", name, why)
	}
	base, ok := strings.CutSuffix(name, report.Suffix)
	if !ok {
		return bad("no " + report.Suffix + " suffix")
	}
	f := strings.Split(base, "-")
	if len(f) < 2 || len(f) > 3 {
		return bad("want SEQ-BOOT or SEQ-BOOT-TIME")
	}
	var n Name
	if !allDigits(f[0]) || len(f[0]) > 20 {
		return bad("sequence number")
	}
	seq, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return bad("sequence number")
	}
	n.Seq = seq
	if len(f[1]) != 8 || strings.Trim(f[1], "0123456789abcdef") != "" {
		return bad("boot tag")
	}
	n.Boot = f[1]
	if len(f) == 3 {
		if !allDigits(f[2]) || len(f[2]) > 18 || f[2][0] == '0' {
			return bad("time")
		}
		n.Time, _ = strconv.ParseInt(f[2], 10, 64)
	}
	return n, nil
}

// ParseName returns the sequence number of an entry name.
func ParseName(name string) (uint64, bool) {
	n, err := ParseEntry(name)
	return n.Seq, err == nil
}

func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// bootTag is the first 8 hex digits of the boot id, FAT-safe.
func bootTag(bootID string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(bootID) {
		if (r >= '0' && r <= '9') || (r >= 'a' && r <= 'f') {
			b.WriteRune(r)
			if b.Len() == 8 {
				break
			}
		}
	}
	for b.Len() < 8 {
		b.WriteByte('0')
	}
	return b.String()
}
