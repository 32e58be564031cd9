// Package config reads /etc/unwound/unwound.toml, shared by the handler and
// the uploader. Every key has a default (configs/unwound.toml documents
// them); unknown keys and bad values are errors that name the key and line.
// A handler with a broken config still reports the crash: it falls back to
// the defaults and says so.
package config

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/internal/regular"
	"github.com/unwound-dev/unwound/internal/sha256"
	"github.com/unwound-dev/unwound/report"
)

// DefaultPath is where packages install the config.
const DefaultPath = "/etc/unwound/unwound.toml"

// MaxSize bounds the config file, which is read on every crash. It is a
// hard limit against a runaway file, far above a real config (a few KB):
// a file cut at a smaller cap lost the keys past it, and with them, when
// [queue] came last, where reports go.
const MaxSize = 1 << 20

// Config is the whole file.
type Config struct {
	Device    Device    `toml:"device"`
	Handler   Handler   `toml:"handler"`
	Queue     Queue     `toml:"queue"`
	RateLimit RateLimit `toml:"rate_limit"`
	Upload    Upload    `toml:"upload"`
	Serial    Serial    `toml:"serial"`
}

// Device identifies the board.
type Device struct {
	// ID is sent with every report. Empty: a keyed hash of
	// /etc/machine-id, never the raw id (systemd treats it as secret).
	ID string `toml:"id"`
	// Attributes are copied into every report as device.attributes: a few
	// short strings such as hw_rev or channel, bounded by
	// report.MaxAttributes, MaxAttributeKey and MaxAttributeValue.
	Attributes map[string]string `toml:"attributes"`
}

// Handler bounds the crash handler.
type Handler struct {
	MaxThreads     int      `toml:"max_threads"`
	MaxFrames      int      `toml:"max_frames"`
	Deadline       Duration `toml:"deadline"`
	FreezeBudget   Duration `toml:"freeze_budget"` // time the crashed process may be held
	StackWindowKiB int      `toml:"stack_window_kib"`
	MemoryLimitMiB int      `toml:"memory_limit_mib"`
	Live           bool     `toml:"live"` // read stacks from /proc/<pid>/mem while the process is frozen
	IncludeCmdline bool     `toml:"include_cmdline"`
	MaskFaultAddr  bool     `toml:"mask_fault_addr"` // report the fault address's 4 KiB page only
	HonorRlimit    bool     `toml:"honor_rlimit_core"`
	SaveCoreDir    string   `toml:"save_core_dir"`
	// Supervise runs the unwinding in a child process, so that a fatal
	// error in it still leaves a registers-only report.
	Supervise bool `toml:"supervise"`
	// SocketIdleExit is how long the coredump socket server, started by
	// systemd's socket activation, stays with no crash in hand before it
	// exits (systemd keeps the socket and starts it for the next crash).
	// 0: it never exits. A server that bound its own socket never does.
	// (Durations have no sign: a negative one is a parse error.)
	SocketIdleExit Duration `toml:"socket_idle_exit"`
	// DumpModePolicy is what becomes of processes dumped with %d other
	// than 1 (changed credentials): report, registers, drop.
	DumpModePolicy string `toml:"dump_mode_policy"`
	// StackScan lets the unwinder fall back to a validated stack scan
	// (low-trust frames) where no table or frame record says more.
	StackScan bool `toml:"stack_scan"`
}

// Queue is the report queue on flash.
type Queue struct {
	Dir           string   `toml:"dir"`
	MaxEntries    int      `toml:"max_entries"`
	MaxBytesKiB   int      `toml:"max_bytes_kib"`
	MinFreeKiB    int      `toml:"min_free_kib"`
	MinFreeInodes int      `toml:"min_free_inodes"`
	MaxAge        Duration `toml:"max_age"`
	WhenFull      string   `toml:"when_full"`
	AllowVolatile bool     `toml:"allow_volatile"` // accept tmpfs/ramfs (tests, boards without flash)
}

// RateLimit bounds crash storms.
type RateLimit struct {
	Count         int      `toml:"count"`
	Window        Duration `toml:"window"`
	PerExecutable bool     `toml:"per_executable"`
	MaxConcurrent int      `toml:"max_concurrent"`
	StateDir      string   `toml:"state_dir"` // volatile: counters and slots
}

// Upload configures the uploader's transport.
type Upload struct {
	Transport  string   `toml:"transport"`
	URL        string   `toml:"url"`
	Token      string   `toml:"token"`
	TokenFile  string   `toml:"token_file"`
	CAFile     string   `toml:"ca_file"`
	ClientCert string   `toml:"client_cert"`
	ClientKey  string   `toml:"client_key"`
	Interval   Duration `toml:"interval"`
	Timeout    Duration `toml:"timeout"`
}

// Serial is the uploader's serial link.
type Serial struct {
	Port        string `toml:"port"`
	Baud        int    `toml:"baud"`
	FlowControl string `toml:"flow_control"` // none, rtscts
	Framing     string `toml:"framing"`      // text, binary
}

// Default returns the configuration used when no file exists; it is what
// configs/unwound.toml spells out. Not inlined: the handler calls it from several places, and each inlined
// copy of the literal cost it flash (docs/design.md, "Footprint").
//
//go:noinline
func Default() *Config {
	return &Config{
		Handler: Handler{
			MaxThreads:     64,
			MaxFrames:      256,
			Deadline:       Duration(5 * time.Second),
			FreezeBudget:   Duration(time.Second),
			StackWindowKiB: 256,
			MemoryLimitMiB: 32,
			Live:           true,
			Supervise:      true,
			SocketIdleExit: Duration(10 * time.Minute),
			DumpModePolicy: "report",
			StackScan:      true,
		},
		Queue: Queue{
			Dir:           "/var/lib/unwound/queue",
			MaxEntries:    200,
			MaxBytesKiB:   512,
			MinFreeKiB:    10240,
			MinFreeInodes: 64,
			MaxAge:        Duration(720 * time.Hour),
			WhenFull:      "evict-oldest",
		},
		RateLimit: RateLimit{
			Count:         5,
			Window:        Duration(time.Hour),
			PerExecutable: true,
			MaxConcurrent: 2,
			StateDir:      "/run/unwound",
		},
		Upload: Upload{
			Transport: "http",
			Interval:  Duration(time.Hour),
			Timeout:   Duration(30 * time.Second),
		},
		Serial: Serial{
			Port:        "/dev/ttyS1",
			Baud:        115200,
			FlowControl: "none",
			Framing:     "text",
		},
	}
}

// Duration is a time.Duration written as "5s", "1h30m".
type Duration time.Duration

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, ok := parseDuration(string(b))
	if !ok {
		return fmt.Errorf("%q is not a duration (want e.g. \"5s\", \"1h\")", b)
	}
	*d = Duration(v)
	return nil
}

// parseDuration reads what time.ParseDuration reads, without a sign: a
// sequence of decimal numbers, each with an optional fraction and a unit
// (ns, us, µs, ms, s, m, h), or a bare "0". The handler links it instead
// of the time package's parser, which is larger than it needs.
func parseDuration(s string) (time.Duration, bool) {
	if s == "0" {
		return 0, true
	}
	if s == "" {
		return 0, false
	}
	var total uint64
	for s != "" {
		var whole, frac, scale uint64 = 0, 0, 1
		i := 0
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if whole > (1<<63-1)/10 {
				return 0, false
			}
			whole = whole*10 + uint64(s[i]-'0')
		}
		digits := i
		if i < len(s) && s[i] == '.' {
			i++
			for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
				if scale <= (1<<63-1)/10 { // further digits are below a nanosecond
					frac = frac*10 + uint64(s[i]-'0')
					scale *= 10
				}
			}
			digits += i - digits - 1
		}
		if digits == 0 {
			return 0, false
		}
		j := i
		for j < len(s) && s[j] != '.' && (s[j] < '0' || s[j] > '9') {
			j++
		}
		var unit uint64
		switch s[i:j] {
		case "ns":
			unit = uint64(time.Nanosecond)
		case "us", "µs", "μs":
			unit = uint64(time.Microsecond)
		case "ms":
			unit = uint64(time.Millisecond)
		case "s":
			unit = uint64(time.Second)
		case "m":
			unit = uint64(time.Minute)
		case "h":
			unit = uint64(time.Hour)
		default:
			return 0, false
		}
		if whole > (1<<63)/unit {
			return 0, false
		}
		v := whole*unit + uint64(float64(frac)*(float64(unit)/float64(scale)))
		if v > 1<<63-1 || total > 1<<63-1-v {
			return 0, false
		}
		total += v
		s = s[j:]
	}
	return time.Duration(total), true
}

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Error is a problem with the config file, with its place.
type Error struct {
	Path string
	Line int // 0 when unknown
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Path)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and checks the file at path. A file that cannot be read is
// (nil, the error). Otherwise Load returns what Parse returns: the config
// with every good key, and an error naming the key and line of each bad
// one. A file up to MaxSize is read whole; of a larger one, only the
// first MaxSize bytes up to their last full line: that is an error, but
// the keys in those bytes count.
func Load(path string) (*Config, error) {
	text, err := regular.ReadFile(path, MaxSize)
	if err != nil {
		return nil, err
	}
	var big error
	if len(text) > MaxSize {
		text = text[:bytes.LastIndexByte(text[:MaxSize], '\n')+1]
		big = &Error{Path: path, Line: strings.Count(string(text), "\n") + 1,
			Msg: fmt.Sprintf("file larger than %d bytes: this line and the rest are ignored", MaxSize)}
	}
	c, err := Parse(path, text)
	return c, errors.Join(err, big)
}

// Parse checks and decodes config text; name is used in errors. It always
// returns a config: the defaults, overridden by every key that is fine on
// its own (see parseTOML for what a bad line costs). The error names the
// key and line of each key left out: unknown, of the wrong type, out of
// range, or on a line that is not TOML.
func Parse(name string, text []byte) (*Config, error) {
	entries, bad := parseTOML(text)
	c := Default()
	for _, e := range entries {
		trial := *c
		if err := trial.set(e); err != nil {
			bad = append(bad, &Error{Line: e.line, Key: e.name(), Msg: err.Error()})
			continue
		}
		// The defaults pass every check, so any problem is this key's.
		if ps := trial.check(); len(ps) > 0 {
			for _, p := range ps {
				bad = append(bad, &Error{Line: e.line, Key: p.key, Msg: p.msg})
			}
			continue
		}
		*c = trial
	}
	sort.SliceStable(bad, func(i, j int) bool { return bad[i].Line < bad[j].Line })
	errs := make([]error, len(bad))
	for i, e := range bad {
		e.Path = name
		errs[i] = e
	}
	return c, errors.Join(errs...)
}

// LoadOrDefault never fails: a missing file means the defaults; a file
// that cannot be read means the defaults and the error; a broken one
// means every good key, the defaults for the others, and the errors. The
// caller logs the error and puts it in the report. A crash is never lost
// to a config typo.
func LoadOrDefault(path string) (*Config, error) {
	c, err := Load(path)
	switch {
	case err == nil:
		return c, nil
	case c == nil && errors.Is(err, os.ErrNotExist):
		return Default(), nil
	case c == nil:
		return Default(), fmt.Errorf("config unreadable, using the defaults: %w", err)
	}
	return c, fmt.Errorf("config has errors, using defaults for the keys in error: %w", err)
}

// Salvage keeps every key of a broken config that is fine on its own and
// uses the default for the others: a typo in one key must not send reports
// to the default queue directory, or drop the device id.
func Salvage(text []byte) *Config {
	c, _ := Parse("", text)
	return c
}

type problem struct{ key, msg string }

func (c *Config) check() []problem {
	var ps []problem
	rng := func(key string, v, lo, hi int) {
		if v < lo || v > hi {
			ps = append(ps, problem{key, fmt.Sprintf("%d out of range %d..%d", v, lo, hi)})
		}
	}
	pos := func(key string, d Duration) {
		if d <= 0 {
			ps = append(ps, problem{key, "must be positive"})
		}
	}
	oneOf := func(key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		ps = append(ps, problem{key, fmt.Sprintf("%q: want one of %s", v, strings.Join(allowed, ", "))})
	}
	if msg := checkAttributes(c.Device.Attributes); msg != "" {
		ps = append(ps, problem{"device.attributes", msg})
	}
	h := &c.Handler
	rng("handler.max_threads", h.MaxThreads, 1, 4096)
	rng("handler.max_frames", h.MaxFrames, 2, 65536)
	pos("handler.deadline", h.Deadline)
	pos("handler.freeze_budget", h.FreezeBudget)
	rng("handler.stack_window_kib", h.StackWindowKiB, 4, 64<<10)
	rng("handler.memory_limit_mib", h.MemoryLimitMiB, 8, 4096)
	oneOf("handler.dump_mode_policy", h.DumpModePolicy, "report", "registers", "drop")
	q := &c.Queue
	if q.Dir == "" || !strings.HasPrefix(q.Dir, "/") {
		ps = append(ps, problem{"queue.dir", fmt.Sprintf("%q: want an absolute path", q.Dir)})
	}
	rng("queue.max_entries", q.MaxEntries, 1, 1<<20)
	rng("queue.max_bytes_kib", q.MaxBytesKiB, 16, 1<<30)
	rng("queue.min_free_kib", q.MinFreeKiB, 0, 1<<30)
	rng("queue.min_free_inodes", q.MinFreeInodes, 0, 1<<30)
	pos("queue.max_age", q.MaxAge)
	oneOf("queue.when_full", q.WhenFull, "evict-oldest", "drop-newest")
	r := &c.RateLimit
	rng("rate_limit.count", r.Count, 0, 1<<20)
	pos("rate_limit.window", r.Window)
	rng("rate_limit.max_concurrent", r.MaxConcurrent, 1, 64)
	if !strings.HasPrefix(r.StateDir, "/") {
		ps = append(ps, problem{"rate_limit.state_dir", fmt.Sprintf("%q: want an absolute path", r.StateDir)})
	}
	u := &c.Upload
	oneOf("upload.transport", u.Transport, "http", "serial")
	pos("upload.interval", u.Interval)
	pos("upload.timeout", u.Timeout)
	if u.URL != "" && !strings.HasPrefix(u.URL, "http://") && !strings.HasPrefix(u.URL, "https://") {
		ps = append(ps, problem{"upload.url", fmt.Sprintf("%q: want http:// or https://", u.URL)})
	}
	s := &c.Serial
	rng("serial.baud", s.Baud, 50, 16000000)
	oneOf("serial.flow_control", s.FlowControl, "none", "rtscts")
	oneOf("serial.framing", s.Framing, "text", "binary")
	return ps
}

// checkAttributes bounds device.attributes: they travel in every report
// and are the columns a collector counts by, so they are few and short.
// Keys are bare TOML keys; values are printable.
func checkAttributes(a map[string]string) string {
	bad, found := "", false
	for k, v := range a {
		ok := len(k) > 0 && len(k) <= report.MaxAttributeKey && len(v) <= report.MaxAttributeValue &&
			strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == ""
		for i := 0; i < len(v); i++ {
			ok = ok && v[i] >= 0x20 && v[i] != 0x7f
		}
		if !ok {
			if !found || k < bad {
				bad, found = k, true // the same one every time
			}
		}
	}
	switch {
	case found:
		return fmt.Sprintf("%q = %q: want a key of 1..%d of A-Z a-z 0-9 _ - and a printable value of at most %d bytes",
			bad, a[bad], report.MaxAttributeKey, report.MaxAttributeValue)
	case len(a) > report.MaxAttributes:
		return fmt.Sprintf("%d attributes, at most %d", len(a), report.MaxAttributes)
	}
	return ""
}

// DeviceID returns the configured id, or an application-specific hash of
// /etc/machine-id (HMAC-SHA256 keyed by the machine id, as systemd's
// sd_id128_get_machine_app_specific does), or "" when neither exists.
func (c *Config) DeviceID() string {
	if c.Device.ID != "" {
		return c.Device.ID
	}
	mid, err := regular.ReadFile("/etc/machine-id", 4096)
	if err != nil {
		return ""
	}
	mid = bytes.TrimSpace(mid)
	if len(mid) == 0 {
		return ""
	}
	m := sha256.NewHMAC(mid)
	m.Write([]byte("unwound device id"))
	return hex.EncodeToString(m.Sum(nil)[:16])
}
