package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestShippedConfigIsTheDefault(t *testing.T) {
	c, err := Load("../configs/unwound.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("configs/unwound.toml differs from Default():\nfile    %+v\ndefault %+v", c, Default())
	}
}

func TestParseErrorsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown key", "[handler]\nmax_frames = 10\nmax_frame = 3\n", "x.toml:3: handler.max_frame: unknown key"},
		{"unknown table", "[handlr]\nmax_frames = 10\n", "x.toml:2: handlr.max_frames: unknown key"},
		{"wrong type", "[handler]\n\nmax_frames = \"ten\"\n", "x.toml:3: handler.max_frames: incompatible types"},
		{"bad duration", "[handler]\ndeadline = \"5 seconds\"\n", "is not a duration"},
		{"out of range", "[queue]\nmax_entries = 0\n", "x.toml:2: queue.max_entries: 0 out of range"},
		{"bad enum", "[queue]\nwhen_full = \"panic\"\n", "queue.when_full: \"panic\": want one of"},
		{"relative dir", "[queue]\ndir = \"queue\"\n", "queue.dir"},
		{"syntax", "[handler\n", "x.toml:1: table header"},
		{"bad url", "[upload]\nurl = \"ftp://x\"\n", "upload.url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.toml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseOverridesDefaults(t *testing.T) {
	c, err := Parse("x", []byte("[handler]\ndeadline = \"2s\"\n[queue]\ndir = \"/data/q\"\nallow_volatile = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Handler.Deadline.D() != 2*time.Second || c.Queue.Dir != "/data/q" || !c.Queue.AllowVolatile {
		t.Errorf("got %+v", c)
	}
	if c.Handler.MaxFrames != 256 {
		t.Errorf("unset key lost its default: max_frames = %d", c.Handler.MaxFrames)
	}
}

func TestLoadOrDefault(t *testing.T) {
	dir := t.TempDir()
	c, err := LoadOrDefault(filepath.Join(dir, "missing.toml"))
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Errorf("missing file: %v, %+v", err, c)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[queue]\nmax_entries = -1\n"), 0o644)
	c, err = LoadOrDefault(bad)
	var ce *Error
	if err == nil || !errors.As(err, &ce) || !reflect.DeepEqual(c, Default()) {
		t.Errorf("broken file: err %v, config %+v", err, c)
	}
	if c := Salvage([]byte("[queue\n")); !reflect.DeepEqual(c, Default()) {
		t.Errorf("salvage of non-TOML: %+v", c)
	}
	mixed := filepath.Join(dir, "mixed.toml")
	os.WriteFile(mixed, []byte("[queue]\ndir = \"/data/q\"\nmax_entries = -1\n[handler]\nmax_frames = \"many\"\ndeadline = \"2s\"\nbogus = 1\n"), 0o644)
	c, err = LoadOrDefault(mixed)
	if err == nil || c.Queue.Dir != "/data/q" || c.Queue.MaxEntries != 200 || c.Handler.MaxFrames != 256 || c.Handler.Deadline.D() != 2*time.Second {
		t.Errorf("salvage: err %v, config %+v", err, c)
	}
	big := filepath.Join(dir, "big.toml")
	os.WriteFile(big, make([]byte, MaxSize+10), 0o644)
	if _, err := Load(big); err == nil {
		t.Error("oversized file accepted")
	}
}

func FuzzParse(f *testing.F) {
	shipped, _ := os.ReadFile("../configs/unwound.toml")
	f.Add(shipped)
	f.Add([]byte("[handler]\nmax_frames = 3\n"))
	f.Add([]byte("[[queue]]\n"))
	f.Add([]byte("a = [1, [2, [3]]]\n"))
	f.Add([]byte("\ufeff[queue]\ndir = \"/q\"\n"))
	f.Add([]byte("[queue]\nx = [\n1,\n]\ndir = \"/q\"\n[queue]\ndir = \"/r\"\n"))
	f.Add([]byte("[device]\nid = \"\"\"\na\n\"\"\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, _ := Parse("fuzz", b)
		if c == nil || len(c.check()) != 0 {
			t.Fatalf("salvaged a config that fails its checks: %+v", c)
		}
	})
}

// FuzzDuration holds the config's duration parser to time.ParseDuration
// for every unsigned input: the same value, or both refuse it.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"0", "5s", "1h30m", "250ms", "1.5s", "2us", "3µs", ".5h", "1.s", "", "s", "1", "-1s", "+2s", "1e3s", "9223372036s", "2562047h47m16.854775807s", "2562047h47m16.854775808s", "0.0000000001s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			return
		}
		got, ok := parseDuration(s)
		want, err := time.ParseDuration(s)
		if ok != (err == nil) {
			t.Fatalf("%q: ok %v, time.ParseDuration: %v", s, ok, err)
		}
		if ok && got != want {
			d := got - want
			if d < -1 || d > 1 { // rounding of the fraction: a nanosecond either way
				t.Fatalf("%q: %v, time.ParseDuration %v", s, got, want)
			}
		}
	})
}

// TestSocketIdleExit: handler.socket_idle_exit is 10 minutes by default,
// "0" is never, and it has no sign.
func TestSocketIdleExit(t *testing.T) {
	if d := Default().Handler.SocketIdleExit.D(); d != 10*time.Minute {
		t.Errorf("default %v, want 10m", d)
	}
	c, err := Parse("x", []byte("[handler]\nsocket_idle_exit = \"0\"\n"))
	if err != nil || c.Handler.SocketIdleExit != 0 {
		t.Errorf("\"0\": %v, %v", c.Handler.SocketIdleExit, err)
	}
	c, err = Parse("x", []byte("[handler]\nsocket_idle_exit = \"90s\"\n"))
	if err != nil || c.Handler.SocketIdleExit.D() != 90*time.Second {
		t.Errorf("\"90s\": %v, %v", c.Handler.SocketIdleExit, err)
	}
	if _, err := Parse("x", []byte("[handler]\nsocket_idle_exit = \"-1m\"\n")); err == nil || !strings.Contains(err.Error(), "handler.socket_idle_exit") {
		t.Errorf("\"-1m\": err %v, want one naming the key", err)
	}
}
