package config

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// viaLibrary decodes text with a full TOML library into the defaults: what
// any TOML reader makes of the file.
func viaLibrary(text []byte) (*Config, error) {
	c := Default()
	md, err := toml.NewDecoder(bytes.NewReader(text)).Decode(c)
	if err == nil && len(md.Undecoded()) > 0 {
		err = os.ErrInvalid
	}
	// An empty inline table is no attributes: the library makes an empty
	// map of it, ours none.
	if len(c.Device.Attributes) == 0 {
		c.Device.Attributes = nil
	}
	return c, err
}

func TestTOMLSubsetAccepts(t *testing.T) {
	for _, text := range []string{
		"# only a comment\n",
		"[device]\nid = \"a\\tb\\u00e9\\\"\\\\\" # trailing comment\n",
		"[device]\r\nid = 'C:\\raw'\r\n",
		"[ \"handler\" ]\n\"max_frames\" = 1_000\nmax_threads = +7\nlive = false\n",
		"[queue]\nmax_entries = 0x10\nmax_bytes_kib = 0o777\nmin_free_kib = 0b101\n",
		"  [serial]  # indented\n\tbaud = 9600\n",
	} {
		got, err := Parse("x", []byte(text))
		if err != nil {
			t.Errorf("%q: %v", text, err)
			continue
		}
		want, err := viaLibrary([]byte(text))
		if err != nil {
			t.Errorf("%q: the TOML library refuses it: %v", text, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %+v\nwant %+v", text, got, want)
		}
	}
}

func TestTOMLSubsetRefuses(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[handler]\nmax_frames = [1]\n", "x:2: handler.max_frames: arrays are not supported"},
		{"[handler]\nmax_frames = 1.5\n", "x:2: handler.max_frames: \"1.5\": not a string, integer or boolean"},
		{"[handler]\nmax_frames = 012\n", "not a string, integer or boolean"},
		{"[handler]\nmax_frames = 1__0\n", "not a string, integer or boolean"},
		{"[handler]\nmax_frames = 99999999999999999999\n", "not a string, integer or boolean"},
		{"[handler]\nmax_frames = 99999999999\n", "99999999999 out of range"},
		{"[device]\nid = \"\"\"x\"\"\"\n", "multi-line strings"},
		{"[device]\nid = \"x\n", "unterminated string"},
		{"[device]\nid = \"\\q\"\n", "bad escape"},
		{"[device]\nid = \"a\" b\n", "after value"},
		{"[device]\nid = \"a\"\nid = \"b\"\n", "x:3: device.id: set twice"},
		{"[device]\n[device]\n", "x:2: [device]: table defined twice (first at line 1)"},
		{"[[queue]]\n", "x:1: arrays of tables"},
		{"[a.b]\n", "dotted table names"},
		{"[handler]\nlive.x = true\n", "dotted keys"},
		{"[handler]\nlive true\n", "want key = value"},
		{"[handler]\nlive = \"yes\"\n", "x:2: handler.live: incompatible types: want a boolean, got a string"},
		{"[handler]\ndeadline = 5\n", "x:2: handler.deadline: incompatible types: want a string, got an integer"},
		{"max_frames = 3\n", "x:1: .max_frames: unknown key"},
		{"[handlr]\n", "x:1: [handlr]: unknown table"},
		{"#\x00\n", "x:1: control character U+0000"},
		{"[device]\nid = \"a\x01\"\n", "x:2: device.id: control character U+0001"},
		{"[device]\r\r\n", "x:1: control character U+000D"},
		{"[0]\n", "x:1: [0]: unknown table"},
		{"[device]\nid = \"\xff\"\n", "x:2: device.id: not UTF-8"},
	} {
		_, err := Parse("x", []byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.text, err, tc.want)
		}
	}
}

// FuzzTOMLSubset proves the reader is a subset of TOML: whatever it accepts,
// a full TOML library accepts too and reads the same values.
func FuzzTOMLSubset(f *testing.F) {
	shipped, _ := os.ReadFile("../configs/unwound.toml")
	f.Add(shipped)
	f.Add([]byte("[device]\nid = \"a\\u00e9'\" # c\n[handler]\nmax_frames = 0x1_0\n"))
	f.Add([]byte("[queue]\ndir = '/x\\y'\nmax_entries = +3\n"))
	f.Add([]byte("\ufeff[device]\nid = \"x\"\n"))
	f.Add([]byte("[handler]\nmax_frames = 1.5\n"))
	f.Add([]byte("[handler]\nmax_frames = -9223372036854775809\n"))
	f.Add([]byte("[device]\nid = \"\\uD800\"\n"))
	f.Add([]byte("[handler]\n[handler]\n"))
	f.Add([]byte("[handler]\nmax_frames = [\n1,\n]\n"))
	f.Add([]byte("[device]\nattributes = { a = \"b\", 'c d' = 'e' }\n"))
	f.Add([]byte("[device]\nattributes = {a=\"\",}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Parse("fuzz", b)
		if err != nil {
			return
		}
		want, err := viaLibrary(b)
		if err != nil {
			t.Fatalf("accepted %q, which the TOML library refuses: %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %+v\nwant %+v", b, got, want)
		}
	})
}

func TestAttributes(t *testing.T) {
	text := "[device]\nattributes = { hw_rev = \"B2\", \"channel\" = 'beta',x-y=\"\" } # c\n"
	c, err := Parse("x", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"hw_rev": "B2", "channel": "beta", "x-y": ""}
	if !reflect.DeepEqual(c.Device.Attributes, want) {
		t.Errorf("got %v, want %v", c.Device.Attributes, want)
	}
	lib, err := viaLibrary([]byte(text))
	if err != nil || !reflect.DeepEqual(lib, c) {
		t.Errorf("the TOML library reads it otherwise: %v %+v", err, lib)
	}
	if c, err := Parse("x", []byte("[device]\nattributes = {}\n")); err != nil || len(c.Device.Attributes) != 0 {
		t.Errorf("{}: %v %v", c.Device.Attributes, err)
	}
}

func TestAttributesBounded(t *testing.T) {
	many := "[device]\nattributes = {"
	for i := 0; i < 17; i++ {
		if i > 0 {
			many += ", "
		}
		many += fmt.Sprintf("k%d = \"v\"", i)
	}
	many += "}\n"
	for _, tc := range []struct{ text, want string }{
		{many, "x:2: device.attributes: 17 attributes, at most 16"},
		{"[device]\nattributes = { " + strings.Repeat("k", 33) + " = \"v\" }\n", "x:2: device.attributes: \"kkkk"},
		{"[device]\nattributes = { \"a b\" = \"v\", c = \"d\" }\n", `"a b" = "v": want a key of 1..32 of A-Z a-z 0-9 _ - and a printable value of at most 64 bytes`},
		{"[device]\nattributes = { \"\" = \"v\" }\n", `"" = "v": want a key`},
		{"[device]\nattributes = { k = \"" + strings.Repeat("v", 65) + "\" }\n", `"k" = "vvvvv`},
		{"[device]\nattributes = { k = \"a\\nb\" }\n", `"k" = "a\nb": want`},
		{"[device]\nattributes = { k = 1 }\n", "inline table: at \"k = 1 }\": want { key = \"string\", … } on one line, each key once"},
		{"[device]\nattributes = { k = \"a\", }\n", "at \"}\": want"},
		{"[device]\nattributes = { k = \"a\", k = \"b\" }\n", "at \"k = \\\"b\\\" }\": want"},
		{"[device]\nattributes = { k = \"a\" \n", "inline table: at \"\": want"},
		{"[device]\nattributes = { k.l = \"a\" }\n", "at \"k.l = "},
		{"[device]\nid = { k = \"a\" }\n", "device.id: incompatible types: want a string, got an inline table"},
		{"[device]\nattributes = \"x\"\n", "want an inline table of strings, got a string"},
	} {
		c, err := Parse("x", []byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.text, err, tc.want)
		}
		if len(c.Device.Attributes) != 0 {
			t.Errorf("%q: attributes %v kept", tc.text, c.Device.Attributes)
		}
	}
}
