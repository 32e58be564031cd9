package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The config is read with a small TOML reader of our own rather than a
// general TOML library: the handler reads it on every crash, and a full
// TOML decoder (with its encoder, datetimes and reflection-driven tables)
// was the largest part of the handler (docs/design.md, "Footprint"). The file
// only needs a subset of TOML, and the subset is TOML: every file this
// reader accepts means the same to any TOML parser.
//
// Accepted: comments, blank lines, [table] headers, key = value with bare
// or quoted keys, and values that are basic or literal strings (one line),
// integers (decimal, 0x, 0o, 0b, underscores) and booleans. Everything else
// in TOML (arrays, inline tables, dotted keys, multi-line strings, floats,
// dates) is an error naming the line: no key of this config needs them.

// entry is one `key = value` of the file.
type entry struct {
	table, key string
	line       int
	val        any // string, int64 or bool
}

func (e entry) name() string {
	if e.key == "" {
		return "[" + e.table + "]"
	}
	return e.table + "." + e.key
}

// parseTOML splits text into entries. A syntax error is an *Error with the
// line; path is filled in by the caller.
func parseTOML(text []byte) ([]entry, error) {
	var out []entry
	seen := map[string]bool{}
	tables := map[string]bool{}
	table := ""
	lines := strings.Split(string(text), "\n")
	for n, line := range lines {
		ln := n + 1
		if n < len(lines)-1 {
			line = strings.TrimSuffix(line, "\r") // CRLF; a lone CR is a control character
		}
		bad := func(format string, a ...any) error {
			return &Error{Line: ln, Msg: fmt.Sprintf(format, a...)}
		}
		if !utf8.ValidString(line) {
			return nil, bad("not UTF-8")
		}
		s := strings.TrimLeft(line, " \t")
		// TOML allows no raw control character but tab, anywhere, comments
		// and strings included (CR only as part of CRLF).
		if i := strings.IndexFunc(s, func(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }); i >= 0 {
			return nil, bad("control character %U (write it escaped in a string)", s[i])
		}
		if s == "" || s[0] == '#' {
			continue
		}
		if s[0] == '[' {
			if strings.HasPrefix(s, "[[") {
				return nil, bad("arrays of tables are not supported by unwound's config reader")
			}
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return nil, bad("table header without ]")
			}
			name, rest, err := parseKey(strings.TrimSpace(s[1:end]))
			if err != nil {
				return nil, bad("table header: %v", err)
			}
			if strings.TrimSpace(rest) != "" {
				return nil, bad("dotted table names are not supported by unwound's config reader")
			}
			if err := endOfLine(s[end+1:]); err != nil {
				return nil, bad("after table header: %v", err)
			}
			if tables[name] {
				return nil, bad("table [%s] defined twice", name)
			}
			tables[name] = true
			table = name
			// The header itself is an entry (no key), so that an unknown
			// table is an error even when it holds no keys.
			out = append(out, entry{table: name, line: ln})
			continue
		}
		key, rest, err := parseKey(s)
		if err != nil {
			return nil, bad("%v", err)
		}
		rest = strings.TrimLeft(rest, " \t")
		if strings.HasPrefix(rest, ".") {
			return nil, bad("dotted keys are not supported by unwound's config reader")
		}
		if !strings.HasPrefix(rest, "=") {
			return nil, bad("want key = value")
		}
		val, rest, err := parseValue(strings.TrimLeft(rest[1:], " \t"))
		if err != nil {
			return nil, &Error{Line: ln, Key: table + "." + key, Msg: err.Error()}
		}
		if err := endOfLine(rest); err != nil {
			return nil, &Error{Line: ln, Key: table + "." + key, Msg: "after value: " + err.Error()}
		}
		e := entry{table: table, key: key, line: ln, val: val}
		if seen[e.name()] {
			return nil, &Error{Line: ln, Key: e.name(), Msg: "set twice"}
		}
		seen[e.name()] = true
		out = append(out, e)
	}
	return out, nil
}

// parseKey reads a bare or quoted key at the start of s.
func parseKey(s string) (key, rest string, err error) {
	if s == "" {
		return "", "", fmt.Errorf("missing key")
	}
	if s[0] == '"' || s[0] == '\'' {
		v, rest, err := parseString(s)
		return v, rest, err
	}
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '-') {
		i++
	}
	if i == 0 {
		return "", "", fmt.Errorf("bad key at %q", short(s))
	}
	return s[:i], s[i:], nil
}

// endOfLine accepts blanks and a comment.
func endOfLine(s string) error {
	s = strings.TrimLeft(s, " \t")
	if s == "" || s[0] == '#' {
		return nil
	}
	return fmt.Errorf("unexpected %q", short(s))
}

func short(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// parseValue reads a string, integer or boolean at the start of s.
func parseValue(s string) (any, string, error) {
	switch {
	case s == "":
		return nil, "", fmt.Errorf("missing value")
	case strings.HasPrefix(s, `"""`), strings.HasPrefix(s, "'''"):
		return nil, "", fmt.Errorf("multi-line strings are not supported by unwound's config reader")
	case s[0] == '"' || s[0] == '\'':
		return parseString(s)
	case s[0] == '[' || s[0] == '{':
		return nil, "", fmt.Errorf("arrays and inline tables are not supported by unwound's config reader")
	}
	i := strings.IndexAny(s, " \t#")
	if i < 0 {
		i = len(s)
	}
	word, rest := s[:i], s[i:]
	switch word {
	case "true":
		return true, rest, nil
	case "false":
		return false, rest, nil
	}
	v, err := parseInt(word)
	if err != nil {
		return nil, "", err
	}
	return v, rest, nil
}

// parseInt reads a TOML integer: decimal with an optional sign, or 0x, 0o,
// 0b; underscores only between digits; no leading zeros.
func parseInt(w string) (int64, error) {
	bad := fmt.Errorf("%q: not a string, integer or boolean (unwound's config reader takes no floats, dates or arrays)", short(w))
	digits, base, neg := w, 10, false
	if len(w) > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'o' || w[1] == 'b') {
		base = map[byte]int{'x': 16, 'o': 8, 'b': 2}[w[1]]
		digits = w[2:]
	} else if w != "" && (w[0] == '+' || w[0] == '-') {
		neg, digits = w[0] == '-', w[1:]
	}
	if digits == "" || digits[0] == '_' || digits[len(digits)-1] == '_' || strings.Contains(digits, "__") {
		return 0, bad
	}
	if base == 10 && len(digits) > 1 && digits[0] == '0' {
		return 0, bad
	}
	u, err := strconv.ParseUint(strings.ReplaceAll(digits, "_", ""), base, 64)
	if err != nil || u > 1<<63-1 && !(neg && u == 1<<63) {
		return 0, bad
	}
	if neg {
		return -int64(u), nil
	}
	return int64(u), nil
}

// parseString reads a one-line basic ("…", with escapes) or literal ('…')
// string at the start of s.
func parseString(s string) (string, string, error) {
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == q:
			return b.String(), s[i+1:], nil
		case c < 0x20 && c != '\t' || c == 0x7f:
			return "", "", fmt.Errorf("control character in string")
		case c == '\\' && q == '"':
			if i+1 >= len(s) {
				return "", "", fmt.Errorf("unterminated string")
			}
			i++
			switch s[i] {
			case 'b':
				b.WriteByte('\b')
			case 't':
				b.WriteByte('\t')
			case 'n':
				b.WriteByte('\n')
			case 'f':
				b.WriteByte('\f')
			case 'r':
				b.WriteByte('\r')
			case '"':
				b.WriteByte('"')
			case '\\':
				b.WriteByte('\\')
			case 'u', 'U':
				n := 4
				if s[i] == 'U' {
					n = 8
				}
				if i+n >= len(s) {
					return "", "", fmt.Errorf("short \\%c escape", s[i])
				}
				r, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(r)) {
					return "", "", fmt.Errorf("bad \\%c escape", s[i])
				}
				b.WriteRune(rune(r))
				i += n
			default:
				return "", "", fmt.Errorf("bad escape \\%c", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", fmt.Errorf("unterminated string")
}

// textValue is a field written as a string and parsed by its type. Not
// encoding.TextUnmarshaler: a call through that interface would link the
// UnmarshalText of every type the handler ever puts in an interface, and
// time.Time's brings time.Parse (docs/design.md, "Footprint").
type textValue interface{ setText(string) error }

func (d *Duration) setText(s string) error { return d.UnmarshalText([]byte(s)) }

// set stores e in c: the field whose toml tags are e's table and key. An
// unknown key or a value of the wrong type is an error.
func (c *Config) set(e entry) error {
	tv, ok := field(reflect.ValueOf(c).Elem(), e.table)
	if e.key == "" {
		if !ok || tv.Kind() != reflect.Struct {
			return fmt.Errorf("unknown table")
		}
		return nil
	}
	if !ok || tv.Kind() != reflect.Struct {
		return fmt.Errorf("unknown key")
	}
	f, ok := field(tv, e.key)
	if !ok {
		return fmt.Errorf("unknown key")
	}
	if u, ok := f.Addr().Interface().(textValue); ok {
		s, ok := e.val.(string)
		if !ok {
			return fmt.Errorf("incompatible types: want a string, got %s", kind(e.val))
		}
		return u.setText(s)
	}
	switch f.Kind() {
	case reflect.String:
		if s, ok := e.val.(string); ok {
			f.SetString(s)
			return nil
		}
	case reflect.Bool:
		if v, ok := e.val.(bool); ok {
			f.SetBool(v)
			return nil
		}
	case reflect.Int:
		if v, ok := e.val.(int64); ok {
			if f.OverflowInt(v) {
				return fmt.Errorf("%d: out of range", v)
			}
			f.SetInt(v)
			return nil
		}
	}
	return fmt.Errorf("incompatible types: want %s, got %s", kindName(f.Kind()), kind(e.val))
}

func field(v reflect.Value, tag string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Tag.Get("toml") == tag {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func kind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	default:
		return "a boolean"
	}
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Int:
		return "an integer"
	default:
		return "a boolean"
	}
}
