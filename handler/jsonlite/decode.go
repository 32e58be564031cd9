package jsonlite

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds nesting: input may be hostile.
const maxDepth = 64

// Unmarshal decodes JSON into v, a non-nil pointer, as json.Unmarshal does
// for the supported types: object members without a matching field are
// skipped, null leaves the target as it is, integers out of the target's
// range and values of the wrong kind are errors.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("jsonlite: Unmarshal needs a non-nil pointer")
	}
	d := &decoder{s: data}
	d.space()
	if err := d.value(rv.Elem(), 0); err != nil {
		return err
	}
	d.space()
	if d.i != len(d.s) {
		return d.errorf("data after the value")
	}
	return nil
}

type decoder struct {
	s []byte
	i int
}

func (d *decoder) errorf(format string, a ...any) error {
	return fmt.Errorf("jsonlite: offset %d: %s", d.i, fmt.Sprintf(format, a...))
}

func (d *decoder) space() {
	for d.i < len(d.s) && (d.s[d.i] == ' ' || d.s[d.i] == '\t' || d.s[d.i] == '\n' || d.s[d.i] == '\r') {
		d.i++
	}
}

func (d *decoder) literal(w string) bool {
	if len(d.s)-d.i >= len(w) && string(d.s[d.i:d.i+len(w)]) == w {
		d.i += len(w)
		return true
	}
	return false
}

// value decodes one value into v; an invalid v (skipped member) parses and
// discards it.
func (d *decoder) value(v reflect.Value, depth int) error {
	if depth > maxDepth {
		return d.errorf("nested too deep")
	}
	if d.i >= len(d.s) {
		return d.errorf("unexpected end")
	}
	if d.literal("null") {
		return nil
	}
	if v.IsValid() && v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.value(v.Elem(), depth+1)
	}
	switch c := d.s[d.i]; {
	case c == '{':
		return d.object(v, depth)
	case c == '[':
		return d.array(v, depth)
	case c == '"':
		s, err := d.str()
		if err != nil {
			return err
		}
		if !v.IsValid() {
			return nil
		}
		if v.Kind() != reflect.String {
			return d.errorf("string into %v", v.Type())
		}
		v.SetString(s)
		return nil
	case d.literal("true"), d.literal("false"):
		if !v.IsValid() {
			return nil
		}
		if v.Kind() != reflect.Bool {
			return d.errorf("boolean into %v", v.Type())
		}
		v.SetBool(d.s[d.i-1] == 'e' && d.s[d.i-2] == 'u')
		return nil
	case c == '-' || c >= '0' && c <= '9':
		return d.number(v)
	}
	return d.errorf("unexpected %q", d.s[d.i])
}

func (d *decoder) number(v reflect.Value) error {
	start := d.i
	if d.s[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || d.s[digits] == '0' && d.i-digits > 1 {
		return d.errorf("bad number")
	}
	if d.i < len(d.s) && (d.s[d.i] == '.' || d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		return d.errorf("only integers are supported")
	}
	text := string(d.s[start:d.i])
	if !v.IsValid() {
		return nil
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || v.OverflowInt(n) {
			return d.errorf("%s out of range for %v", text, v.Type())
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(text, 10, 64)
		if err != nil || v.OverflowUint(n) {
			return d.errorf("%s out of range for %v", text, v.Type())
		}
		v.SetUint(n)
	default:
		return d.errorf("number into %v", v.Type())
	}
	return nil
}

func (d *decoder) array(v reflect.Value, depth int) error {
	d.i++ // [
	if v.IsValid() {
		if v.Kind() != reflect.Slice {
			return d.errorf("array into %v", v.Type())
		}
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
	}
	d.space()
	if d.literal("]") {
		return nil
	}
	for {
		d.space()
		elem := reflect.Value{}
		if v.IsValid() {
			elem = reflect.New(v.Type().Elem()).Elem()
		}
		if err := d.value(elem, depth+1); err != nil {
			return err
		}
		if v.IsValid() {
			v.Set(reflect.Append(v, elem))
		}
		d.space()
		if d.literal("]") {
			return nil
		}
		if !d.literal(",") {
			return d.errorf("want , or ]")
		}
	}
}

func (d *decoder) object(v reflect.Value, depth int) error {
	d.i++ // {
	if v.IsValid() {
		switch {
		case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String:
			if v.IsNil() {
				v.Set(reflect.MakeMap(v.Type()))
			}
		case v.Kind() == reflect.Struct:
		default:
			return d.errorf("object into %v", v.Type())
		}
	}
	d.space()
	if d.literal("}") {
		return nil
	}
	for {
		d.space()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return d.errorf("want a member name")
		}
		name, err := d.str()
		if err != nil {
			return err
		}
		d.space()
		if !d.literal(":") {
			return d.errorf("want :")
		}
		d.space()
		switch {
		case !v.IsValid():
			err = d.value(reflect.Value{}, depth+1)
		case v.Kind() == reflect.Map:
			elem := reflect.New(v.Type().Elem()).Elem()
			if err = d.value(elem, depth+1); err == nil {
				v.SetMapIndex(reflect.ValueOf(name).Convert(v.Type().Key()), elem)
			}
		default:
			err = d.value(structField(v, name), depth+1)
		}
		if err != nil {
			return err
		}
		d.space()
		if d.literal("}") {
			return nil
		}
		if !d.literal(",") {
			return d.errorf("want , or }")
		}
	}
}

// structField finds the field a member name decodes into (exact name
// first, then case-insensitively, as encoding/json does); invalid when none.
func structField(v reflect.Value, name string) reflect.Value {
	t := v.Type()
	fold := -1
	for i := 0; i < t.NumField(); i++ {
		n, _, ok := fieldName(t.Field(i))
		if !ok {
			continue
		}
		if n == name {
			return v.Field(i)
		}
		if fold < 0 && equalFold(n, name) {
			fold = i
		}
	}
	if fold >= 0 {
		return v.Field(fold)
	}
	return reflect.Value{}
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// str reads a string at d.i (the opening quote).
func (d *decoder) str() (string, error) {
	d.i++
	var b []byte
	for d.i < len(d.s) {
		c := d.s[d.i]
		switch {
		case c == '"':
			d.i++
			return string(b), nil
		case c < 0x20:
			return "", d.errorf("control character in string")
		case c == '\\':
			if d.i+1 >= len(d.s) {
				return "", d.errorf("unterminated string")
			}
			d.i++
			switch e := d.s[d.i]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := d.hex4(d.i + 1)
				if !ok {
					return "", d.errorf("bad \\u escape")
				}
				d.i += 4
				if utf16.IsSurrogate(r) {
					if r2, ok := d.hex4(d.i + 3); ok && d.s[d.i+1] == '\\' && d.s[d.i+2] == 'u' {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							r = dec
							d.i += 6
						} else {
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", d.errorf("bad escape")
			}
			d.i++
		default:
			r, size := utf8.DecodeRune(d.s[d.i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, d.s[d.i:d.i+size]...)
			}
			d.i += size
		}
	}
	return "", d.errorf("unterminated string")
}

func (d *decoder) hex4(at int) (rune, bool) {
	if at+4 > len(d.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d.s[at:at+4]), 16, 32)
	return rune(n), err == nil
}
