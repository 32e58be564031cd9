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
// integers (decimal, 0x, 0o, 0b, underscores), booleans, and one-line
// inline tables of such strings (device.attributes). Everything else in
// TOML (arrays, other inline tables, dotted keys, multi-line strings,
// floats, dates) is an error naming the line: no key of this config needs
// them.

// entry is one `key = value` of the file.
type entry struct {
	table, key string
	line       int
	val        any // string, int64, bool or map[string]string
}

func (e entry) name() string {
	if e.key == "" {
		return "[" + e.table + "]"
	}
	return e.table + "." + e.key
}

// bom is the UTF-8 byte order mark some editors write first. TOML readers
// (BurntSushi/toml among them) skip it, and so does this one.
const bom = "\ufeff"

// parseTOML splits text into entries and goes on past bad lines: each is
// an *Error with its line, and its key when it has one (path is filled in
// by the caller), and costs only what it holds:
//   - a bad `key = value` line costs that key; a multi-line string or
//     array (outside the subset) costs its key and the lines it spans;
//   - a key set twice keeps its first value;
//   - a bad table header costs the keys under it, up to the next header;
//   - a table defined twice is an error, but its keys are read: they
//     still say which table they belong to.
//
// The entries are what a TOML reader makes of the file with the bad lines
// deleted (but the keys of a table defined twice).
func parseTOML(text []byte) ([]entry, []*Error) {
	var out []entry
	var errs []*Error
	seen := map[string]int{}   // "table.key": line
	tables := map[string]int{} // table: line of its header
	table, broken := "", 0     // broken: line of the bad header the keys are under
	lines := strings.Split(strings.TrimPrefix(string(text), bom), "\n")
	for n := 0; n < len(lines); n++ {
		ln := n + 1
		line := lines[n]
		if n < len(lines)-1 {
			line = strings.TrimSuffix(line, "\r") // CRLF; a lone CR is a control character
		}
		s := strings.TrimLeft(line, " \t")
		bad := func(key, format string, a ...any) {
			errs = append(errs, &Error{Line: ln, Key: key, Msg: fmt.Sprintf(format, a...)})
		}
		if !utf8.ValidString(line) {
			bad(keyOf(table, s), "not UTF-8")
			continue
		}
		// TOML allows no raw control character but tab, anywhere, comments
		// and strings included (CR only as part of CRLF).
		if i := strings.IndexFunc(s, func(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }); i >= 0 {
			bad(keyOf(table, s), "control character %U (write it escaped in a string)", s[i])
			continue
		}
		if s == "" || s[0] == '#' {
			continue
		}
		if s[0] == '[' {
			name, err := parseHeader(s)
			if err != nil {
				bad("", "%v; the keys under it are ignored", err)
				table, broken = "", ln
				continue
			}
			table, broken = name, 0
			if first, dup := tables[name]; dup {
				bad("["+name+"]", "table defined twice (first at line %d); its keys are read as the first's", first)
				continue
			}
			tables[name] = ln
			// The header itself is an entry (no key), so that an unknown
			// table is an error even when it holds no keys.
			out = append(out, entry{table: name, line: ln})
			continue
		}
		key, rest, err := parseKey(s)
		if err != nil {
			bad("", "%v", err)
			continue
		}
		name := table + "." + key
		rest = strings.TrimLeft(rest, " \t")
		if strings.HasPrefix(rest, ".") {
			bad(name, "dotted keys are not supported by unwound's config reader")
			continue
		}
		if !strings.HasPrefix(rest, "=") {
			bad(name, "want key = value")
			continue
		}
		v := strings.TrimLeft(rest[1:], " \t")
		if broken > 0 {
			bad("?."+key, "under the bad table header of line %d: ignored", broken)
			n = valueEnd(lines, n, v)
			continue
		}
		val, rest, err := parseValue(v)
		if err != nil {
			bad(name, "%v", err)
			n = valueEnd(lines, n, v)
			continue
		}
		if err := endOfLine(rest); err != nil {
			bad(name, "after value: %v", err)
			continue
		}
		if first, dup := seen[name]; dup {
			bad(name, "set twice (first at line %d, which is kept)", first)
			continue
		}
		seen[name] = ln
		out = append(out, entry{table: table, key: key, line: ln, val: val})
	}
	return out, errs
}

// parseHeader reads a [table] header line.
func parseHeader(s string) (string, error) {
	switch {
	case !strings.HasPrefix(s, "["):
		return "", fmt.Errorf("not a table header")
	case strings.HasPrefix(s, "[["):
		return "", fmt.Errorf("arrays of tables are not supported by unwound's config reader")
	}
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return "", fmt.Errorf("table header without ]")
	}
	name, rest, err := parseKey(strings.TrimSpace(s[1:end]))
	if err != nil {
		return "", fmt.Errorf("table header: %v", err)
	}
	if strings.TrimSpace(rest) != "" {
		return "", fmt.Errorf("dotted table names are not supported by unwound's config reader")
	}
	if err := endOfLine(s[end+1:]); err != nil {
		return "", fmt.Errorf("after table header: %v", err)
	}
	return name, nil
}

// keyOf names the key that a line which cannot be read sets, when it can
// tell.
func keyOf(table, s string) string {
	key, rest, err := parseKey(s)
	if err != nil || !strings.HasPrefix(strings.TrimLeft(rest, " \t"), "=") || !utf8.ValidString(key) {
		return ""
	}
	return table + "." + key
}

// valueEnd is the index of the last line of a value that starts with v on
// line n and may span lines: a multi-line string or array. A value never
// closed ends on its own line, and an array also ends before a line that
// reads as `key =` or as a table header: a missing ] must not swallow the
// rest of the file.
func valueEnd(lines []string, n int, v string) int {
	if strings.HasPrefix(v, `"""`) || strings.HasPrefix(v, "'''") {
		delim, rest := v[:3], v[3:]
		for i := n; i < len(lines); i++ {
			if i > n {
				rest = lines[i]
			}
			if strings.Contains(rest, delim) {
				return i
			}
		}
		return n
	}
	if !strings.HasPrefix(v, "[") {
		return n
	}
	depth := 0
	rest := v
	for i := n; i < len(lines); i++ {
		if i > n {
			rest = lines[i]
			s := strings.TrimLeft(rest, " \t")
			if keyOf("", s) != "" {
				return i - 1
			}
			if _, err := parseHeader(s); err == nil {
				return i - 1
			}
		}
		var quote byte
	scan:
		for j := 0; j < len(rest); j++ {
			c := rest[j]
			switch {
			case quote != 0:
				if c == '\\' && quote == '"' {
					j++
				} else if c == quote {
					quote = 0
				}
			case c == '"' || c == '\'':
				quote = c
			case c == '#':
				break scan
			case c == '[':
				depth++
			case c == ']':
				if depth--; depth == 0 {
					return i
				}
			}
		}
	}
	return n
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
	case s[0] == '[':
		return nil, "", fmt.Errorf("arrays are not supported by unwound's config reader")
	case s[0] == '{':
		return parseInlineTable(s)
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

// parseInlineTable reads a one-line inline table of strings, such as
// { hw_rev = "B2", channel = 'beta' }, or {}: the only kind
// device.attributes takes. A trailing comma is an error, as in TOML 1.0.
func parseInlineTable(s string) (map[string]string, string, error) {
	m := map[string]string{}
	rest := strings.TrimLeft(s[1:], " \t")
	for ok := !strings.HasPrefix(rest, "}"); ok; {
		key, r, err := parseKey(rest)
		r = strings.TrimLeft(r, " \t")
		if err != nil || !strings.HasPrefix(r, "=") {
			return nil, "", badInline(rest)
		}
		v, r, _ := parseValue(strings.TrimLeft(r[1:], " \t"))
		str, isStr := v.(string)
		if _, dup := m[key]; !isStr || dup {
			return nil, "", badInline(rest)
		}
		m[key] = str
		r, ok = strings.CutPrefix(strings.TrimLeft(r, " \t"), ",")
		rest = strings.TrimLeft(r, " \t")
	}
	if !strings.HasPrefix(rest, "}") {
		return nil, "", badInline(rest)
	}
	return m, rest[1:], nil
}

func badInline(at string) error {
	return fmt.Errorf("inline table: at %q: want { key = \"string\", … } on one line, each key once", short(at))
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
	case reflect.Map:
		// A new map each time (Parse tries each key on a shallow copy);
		// an empty one is none.
		if m, ok := e.val.(map[string]string); ok {
			if len(m) == 0 {
				m = nil
			}
			*f.Addr().Interface().(*map[string]string) = m
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
	case map[string]string:
		return "an inline table"
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
	case reflect.Map:
		return "an inline table of strings"
	default:
		return "a boolean"
	}
}
