// Package jsonlite encodes the JSON the handler writes (the report), byte
// for byte as encoding/json does for those types, in a fraction of its
// code: encoding/json was a large part of the board's handler binary
// (docs/design.md, "Footprint").
//
// Supported: structs with `json:"name,omitempty"` tags, strings, bools,
// signed and unsigned integers, pointers, slices, maps with string keys
// (sorted, as encoding/json sorts them), and types with a MarshalJSON
// method. Floats, interfaces, embedded structs and Unmarshaler methods are
// not: Marshal refuses such types with an error. The handler reads no JSON
// (its rate-limit state and the supervisor's hand-over are lines of words).
package jsonlite

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Marshaler is a type that writes its own JSON (encoding/json's
// interface of the same name).
type Marshaler interface {
	MarshalJSON() ([]byte, error)
}

var marshalerType = reflect.TypeOf((*Marshaler)(nil)).Elem()

// Marshal returns the compact JSON encoding of v, as json.Marshal does.
func Marshal(v any) ([]byte, error) {
	return appendValue(nil, reflect.ValueOf(v))
}

// MarshalIndent is Marshal with each element on its own line, indented by
// indent per level after prefix, as json.MarshalIndent does.
func MarshalIndent(v any, prefix, indent string) ([]byte, error) {
	b, err := Marshal(v)
	if err != nil {
		return nil, err
	}
	return Indent(b, prefix, indent), nil
}

func appendValue(b []byte, v reflect.Value) ([]byte, error) {
	if !v.IsValid() {
		return append(b, "null"...), nil
	}
	if v.Type().Implements(marshalerType) && !(v.Kind() == reflect.Pointer && v.IsNil()) {
		m, err := v.Interface().(Marshaler).MarshalJSON()
		if err != nil {
			return nil, err
		}
		return append(b, m...), nil
	}
	switch v.Kind() {
	case reflect.String:
		return AppendString(b, v.String()), nil
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(b, v.Uint(), 10), nil
	case reflect.Pointer:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		return appendValue(b, v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil, errors.New("jsonlite: []byte is not supported")
		}
		b = append(b, '[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, v.Index(i)); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return nil, fmt.Errorf("jsonlite: map key type %v is not supported", v.Type().Key())
		}
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(AppendString(b, k.String()), ':')
			var err error
			if b, err = appendValue(b, v.MapIndex(k)); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case reflect.Struct:
		b = append(b, '{')
		first := true
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, omitempty, ok := fieldName(sf)
			if !ok {
				continue
			}
			fv := v.Field(i)
			if omitempty && empty(fv) {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(AppendString(b, name), ':')
			var err error
			if b, err = appendValue(b, fv); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("jsonlite: %v is not supported", v.Type())
}

// fieldName returns a struct field's JSON name; ok is false for fields
// encoding/json skips (unexported, or tagged "-").
func fieldName(sf reflect.StructField) (name string, omitempty, ok bool) {
	if !sf.IsExported() || sf.Anonymous {
		return "", false, false
	}
	tag := sf.Tag.Get("json")
	if tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = sf.Name
	}
	return name, opts == "omitempty" || strings.HasPrefix(opts, "omitempty,") || strings.HasSuffix(opts, ",omitempty"), true
}

// empty is encoding/json's omitempty rule.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return false
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string with encoding/json's escaping:
// <, >, & and U+2028/U+2029 as \u escapes, invalid UTF-8 as U+FFFD.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// Indent re-lays compact JSON (as Marshal writes it) one element per line,
// as json.Indent does.
func Indent(src []byte, prefix, indent string) []byte {
	var b []byte
	depth := 0
	inStr, esc := false, false
	newline := func() {
		b = append(b, '\n')
		b = append(b, prefix...)
		for i := 0; i < depth; i++ {
			b = append(b, indent...)
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if inStr {
			b = append(b, c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
			b = append(b, c)
		case '{', '[':
			b = append(b, c)
			if i+1 < len(src) && (src[i+1] == '}' || src[i+1] == ']') {
				b = append(b, src[i+1])
				i++
				continue
			}
			depth++
			newline()
		case '}', ']':
			depth--
			newline()
			b = append(b, c)
		case ',':
			b = append(b, c)
			newline()
		case ':':
			b = append(b, ':', ' ')
		default:
			b = append(b, c)
		}
	}
	return b
}
