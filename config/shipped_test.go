package config

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// parserKeys lists every "table.key" the parser knows, from the struct tags.
func parserKeys() []string {
	var keys []string
	ct := reflect.TypeOf(Config{})
	for i := 0; i < ct.NumField(); i++ {
		table := ct.Field(i).Tag.Get("toml")
		tt := ct.Field(i).Type
		for j := 0; j < tt.NumField(); j++ {
			keys = append(keys, table+"."+tt.Field(j).Tag.Get("toml"))
		}
	}
	sort.Strings(keys)
	return keys
}

// TestShippedConfigDocumentsEveryKey: configs/unwound.toml sets every key
// the parser knows, and no other, each with its default (the file parses
// to Default(): TestShippedConfigIsTheDefault) and a comment right above
// it or above the run of keys it belongs to.
func TestShippedConfigDocumentsEveryKey(t *testing.T) {
	text, err := os.ReadFile("../configs/unwound.toml")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]map[string]any
	if _, err := toml.Decode(string(text), &raw); err != nil {
		t.Fatal(err)
	}
	var file []string
	for table, kv := range raw {
		for k := range kv {
			file = append(file, table+"."+k)
		}
	}
	sort.Strings(file)
	if got, want := strings.Join(file, " "), strings.Join(parserKeys(), " "); got != want {
		t.Errorf("configs/unwound.toml keys\n %s\nthe parser's\n %s", got, want)
	}
	// Every key line follows a comment line: its one-line explanation.
	prev := ""
	sc := bufio.NewScanner(bytes.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l != "" && l[0] != '#' && l[0] != '[' && !strings.HasPrefix(prev, "#") {
			t.Errorf("configs/unwound.toml:%d: %q has no comment above it", n, l)
		}
		prev = l
	}
	// Each default, spelled in the file, equals Default() key by key (a
	// stronger message than the DeepEqual of TestShippedConfigIsTheDefault).
	c, err := Parse("unwound.toml", text)
	if err != nil {
		t.Fatal(err)
	}
	dv, cv := reflect.ValueOf(*Default()), reflect.ValueOf(*c)
	for i := 0; i < dv.NumField(); i++ {
		for j := 0; j < dv.Field(i).NumField(); j++ {
			if d, f := dv.Field(i).Field(j).Interface(), cv.Field(i).Field(j).Interface(); !reflect.DeepEqual(d, f) {
				t.Errorf("%s.%s: file says %v, default is %v", dv.Type().Field(i).Tag.Get("toml"), dv.Field(i).Type().Field(j).Tag.Get("toml"), f, d)
			}
		}
	}
}

// TestExampleConfigs: every example in configs/examples parses and says
// what its name promises.
func TestExampleConfigs(t *testing.T) {
	files, _ := filepath.Glob("../configs/examples/*.toml")
	checks := map[string]func(*Config) bool{
		"http-upload.toml": func(c *Config) bool {
			return c.Upload.Transport == "http" && strings.HasPrefix(c.Upload.URL, "https://") && c.Upload.TokenFile != ""
		},
		"serial-upload.toml": func(c *Config) bool {
			return c.Upload.Transport == "serial" && c.Serial.Port != Default().Serial.Port
		},
		"tiny-flash.toml": func(c *Config) bool {
			d := Default()
			return c.Queue.MaxBytesKiB < d.Queue.MaxBytesKiB && c.Queue.MaxEntries < d.Queue.MaxEntries &&
				c.Handler.MemoryLimitMiB < d.Handler.MemoryLimitMiB && c.RateLimit.Count < d.RateLimit.Count
		},
	}
	if len(files) != len(checks) {
		t.Errorf("examples %v, want %d", files, len(checks))
	}
	for _, f := range files {
		c, err := Load(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if ok := checks[filepath.Base(f)]; ok == nil || !ok(c) {
			t.Errorf("%s: %+v", filepath.Base(f), c)
		}
		if c.Queue.AllowVolatile {
			t.Errorf("%s: an example must not accept a volatile queue", filepath.Base(f))
		}
	}
}
