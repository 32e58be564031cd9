package config

// Reading a config file: Parse, Load, LoadOrDefault and Salvage; what a
// bad line, a large file or an unreadable one costs, and the defaults.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// board is a config as a board ships it; "@BAD@" marks where each case
// puts its bad line(s), in the [handler] table, between two good keys.
const board = `# /etc/unwound/unwound.toml
[device]
id = "board-7"

[handler]
max_threads = 16
@BAD@
deadline = "2s"

[queue]
dir = "/data/unwound/queue"
max_entries = 50

[rate_limit]
count = 3
window = "10m"

[upload]
url = "https://crash.example.com/ingest"
`

// TestBadLineCostsOnlyItsKey: each kind of line a TOML reader refuses
// costs the key it sets (or the table it opens), never the file: where
// reports go and whether they are kept (queue.*, rate_limit.*,
// device.id) and every other good key stay in force, and the error names
// the bad key and its line.
func TestBadLineCostsOnlyItsKey(t *testing.T) {
	for _, tc := range []struct {
		name, bad string
		want      string // in the error; "" for no error
		// tableLost: the bad line opens a table, and handler.deadline,
		// which follows it, goes with that table.
		tableLost bool
		check     func(c *Config) bool // holds after the case, when set
	}{
		{"float", "max_frames = 1.5", "x.toml:7: handler.max_frames: \"1.5\"", false, nil},
		{"float in a key already set", "max_threads = 1.5", "x.toml:7: handler.max_threads:", false, nil},
		{"integer beyond int64", "max_frames = 99999999999999999999", "x.toml:7: handler.max_frames:", false, nil},
		{"negative beyond int64", "max_frames = -9223372036854775809", "x.toml:7: handler.max_frames:", false, nil},
		{"duplicate key", "max_threads = 8", "x.toml:7: handler.max_threads: set twice (first at line 6", false, nil},
		{"duplicate table", "[handler]\nmax_threads = 8\ninclude_cmdline = true", "x.toml:7: [handler]: table defined twice (first at line 5)",
			false, func(c *Config) bool { return c.Handler.IncludeCmdline }}, // its keys are read
		{"array", "max_frames = [1, 2]", "x.toml:7: handler.max_frames: arrays", false, nil},
		{"multi-line array", "max_frames = [\n  1,\n  [2, 3],\n]", "x.toml:7: handler.max_frames: arrays", false, nil},
		{"array never closed", "max_frames = [1,\n  2,", "x.toml:7: handler.max_frames: arrays", false, nil},
		{"inline table", "max_frames = { a = 1 }", "x.toml:7: handler.max_frames: inline table: at \"a = 1 }\": want {", false, nil},
		{"multi-line string", "save_core_dir = \"\"\"\ndir = \"/evil\"\n\"\"\"", "x.toml:7: handler.save_core_dir: multi-line", false, nil},
		{"NUL byte", "max_frames = 10\x00", "x.toml:7: handler.max_frames: control character U+0000", false, nil},
		{"NUL in a comment", "# \x00", "x.toml:7: control character U+0000", false, nil},
		{"bad \\u escape", `save_core_dir = "/x\uZZZZ"`, "x.toml:7: handler.save_core_dir: bad \\u escape", false, nil},
		{"surrogate \\u escape", `save_core_dir = "/x\uD800"`, "x.toml:7: handler.save_core_dir: bad \\u escape", false, nil},
		{"non-UTF-8", "save_core_dir = \"/x\xff\xfe\"", "x.toml:7: handler.save_core_dir: not UTF-8", false, nil},
		{"unterminated string", `save_core_dir = "/x`, "x.toml:7: handler.save_core_dir: unterminated string", false, nil},
		{"unknown key", "max_frame = 3", "x.toml:7: handler.max_frame: unknown key", false, nil},
		{"out of range", "max_frames = 1", "x.toml:7: handler.max_frames: 1 out of range", false, nil},
		{"wrong type", "live = \"yes\"", "x.toml:7: handler.live: incompatible types", false, nil},
		{"dotted key", "live.x = true", "x.toml:7: handler.live: dotted keys", false, nil},
		{"no =", "live true", "x.toml:7: handler.live: want key = value", false, nil},
		{"garbage", "%%%", "x.toml:7: bad key", false, nil},
		{"bad table header", "[handler", "x.toml:7: table header without ]", true, nil},
		{"array of tables", "[[handler]]", "x.toml:7: arrays of tables", true, nil},
		{"dotted table", "[handler.x]", "x.toml:7: dotted table names", true, nil},
		{"unknown table", "[handlr]", "x.toml:7: [handlr]: unknown table", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(board, "@BAD@", tc.bad, 1)
			c, err := Parse("x.toml", []byte(text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
			checkBoard(t, c, tc.tableLost)
			if tc.check != nil && !tc.check(c) {
				t.Errorf("%+v", c)
			}
		})
	}
}

// checkBoard checks that every good key of board is in force, but
// handler.deadline when tableLost.
func checkBoard(t *testing.T, c *Config, tableLost bool) {
	t.Helper()
	if c.Device.ID != "board-7" || c.Queue.Dir != "/data/unwound/queue" || c.Queue.MaxEntries != 50 ||
		c.RateLimit.Count != 3 || c.RateLimit.Window.D() != 10*time.Minute || c.Upload.URL != "https://crash.example.com/ingest" ||
		c.Handler.MaxThreads != 16 {
		t.Errorf("a good key was lost: %+v", c)
	}
	if c.Handler.Deadline.D() != 2*time.Second && !tableLost {
		t.Errorf("handler.deadline lost: %v", c.Handler.Deadline.D())
	}
	if c.Handler.MaxFrames != 256 || c.Handler.SaveCoreDir != "" || !c.Handler.Live {
		t.Errorf("a bad key was taken: %+v", c.Handler)
	}
}

// TestBOM: a leading byte order mark is skipped, as TOML readers do.
func TestBOM(t *testing.T) {
	text := "\ufeff" + strings.Replace(board, "@BAD@", "", 1)
	c, err := Parse("x.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	checkBoard(t, c, false)
	want, err := viaLibrary([]byte(text))
	if err != nil || !reflect.DeepEqual(want, c) {
		t.Errorf("the TOML library reads it otherwise: %v\n%+v", err, want)
	}
}

// TestLoadLargeFile: a file over MaxSize is read up to its last full line
// within MaxSize; the keys there count, the error names where reading
// stopped.
func TestLoadLargeFile(t *testing.T) {
	dir := t.TempDir()
	text := strings.Replace(board, "@BAD@", "", 1)
	pad := strings.Repeat("# a long comment, the kind a vendor pastes a licence into\n", MaxSize/50)
	p := filepath.Join(dir, "big.toml")
	os.WriteFile(p, []byte(text+pad+"[serial]\nbaud = 9600\n"), 0o644)
	c, err := LoadOrDefault(p)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than %d bytes: this line and the rest are ignored", MaxSize)) {
		t.Errorf("err = %v", err)
	}
	checkBoard(t, c, false)
	if c.Serial.Baud != 115200 {
		t.Errorf("a key past MaxSize was read: baud %d", c.Serial.Baud)
	}
}

// TestLoadQueuePastOldCap: a vendor's config that grew past the old
// 64 KiB cap (comments, a long attribute table) is read whole, so its
// [queue] dir, at the end, still says where reports go.
func TestLoadQueuePastOldCap(t *testing.T) {
	dir := t.TempDir()
	pad := strings.Repeat("# a long comment, the kind a vendor pastes a licence into\n", 100<<10/50)
	text := "[handler]\ndeadline = \"2s\"\n" + pad + "[queue]\ndir = \"/data/unwound/queue\"\n"
	if len(text) <= 64<<10 || len(text) > MaxSize {
		t.Fatalf("%d bytes: not between the old cap and MaxSize", len(text))
	}
	p := filepath.Join(dir, "big.toml")
	os.WriteFile(p, []byte(text), 0o644)
	c, err := LoadOrDefault(p)
	if err != nil {
		t.Errorf("err = %v", err)
	}
	if c.Queue.Dir != "/data/unwound/queue" || c.Handler.Deadline.D() != 2*time.Second {
		t.Errorf("queue.dir %q, deadline %v: a key was lost", c.Queue.Dir, c.Handler.Deadline.D())
	}
}

// TestLoadUnreadable: a config that cannot be read (a FIFO nobody writes
// to, a directory) gives the defaults at once and says so.
func TestLoadUnreadable(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		done := make(chan struct{})
		var c *Config
		var err error
		go func() {
			c, err = LoadOrDefault(p)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: LoadOrDefault blocked", p)
		}
		if err == nil || !strings.Contains(err.Error(), "config unreadable, using the defaults") || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: err = %v", p, err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("%s: not the defaults: %+v", p, c)
		}
	}
}

// FuzzSalvage: whatever one line holds, put among the lines of a board's
// config, it cannot move the queue, change the rate limits or the device
// id, and what is salvaged passes every check.
func FuzzSalvage(f *testing.F) {
	for _, s := range []string{
		"max_frames = 1.5", "max_frames = 99999999999999999999", "max_threads = 8", "[queue]",
		"max_frames = [", "x = \"\"\"", "max_frames = 10\x00", `id = "\uZZZZ"`, "id = \"\xff\"",
		"[[handler]]", "queue.dir = \"/x\"", "\ufeff", "a = {",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		line = strings.ReplaceAll(line, "\n", " ")
		c, _ := Parse("x.toml", []byte(strings.Replace(board, "@BAD@", line, 1)))
		if len(c.check()) != 0 {
			t.Fatalf("salvaged a config that fails its checks: %+v", c)
		}
		if c.Device.ID != "board-7" || c.Queue.Dir != "/data/unwound/queue" || c.Queue.MaxEntries != 50 ||
			c.RateLimit.Count != 3 || c.RateLimit.Window.D() != 10*time.Minute {
			t.Fatalf("%q moved the queue or the limits: %+v", line, c)
		}
	})
}

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
