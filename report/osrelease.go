package report

import (
	"bytes"
	"unicode/utf8"
)

// releaseKeys are the os-release keys of Release's fields, in order, each
// followed by '='.
var releaseKeys = [...]string{"ID=", "VERSION_ID=", "IMAGE_ID=", "IMAGE_VERSION=", "BUILD_ID="}

// ParseOSRelease picks the release fields out of an os-release(5) file:
// lines of KEY=value, the value bare or in double or single quotes, with
// backslash escapes of $ " \ ` inside double quotes; comments and other
// keys are skipped. Each value is cut to MaxReleaseValue bytes (at a
// character boundary). It returns nil when the text sets none of them.
func ParseOSRelease(text []byte) *Release {
	var r Release
	fields := [...]*string{&r.ID, &r.VersionID, &r.ImageID, &r.ImageVersion, &r.BuildID}
	found := false
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		line = bytes.TrimSpace(line)
		for i, k := range releaseKeys {
			if !bytes.HasPrefix(line, []byte(k)) {
				continue
			}
			// Unquote as a POSIX shell reads the assignment (os-release(5)
			// allows no more), then bound.
			v := line[len(k):]
			if n := len(v); n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n-1] == v[0] {
				q := v[0]
				v = append([]byte(nil), v[1:n-1]...)
				for j := 0; q == '"' && j < len(v)-1; j++ {
					if v[j] == '\\' && bytes.IndexByte([]byte("$\"\\`"), v[j+1]) >= 0 {
						v = append(v[:j], v[j+1:]...)
					}
				}
			}
			n := len(v)
			for n > MaxReleaseValue || n > 0 && n < len(v) && !utf8.RuneStart(v[n]) {
				n--
			}
			if n > 0 {
				*fields[i], found = string(v[:n]), true
			}
		}
	}
	if !found {
		return nil
	}
	return &r
}
