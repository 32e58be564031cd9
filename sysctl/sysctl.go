// Package sysctl reads and writes the three kernel settings unwound depends
// on (kernel.core_pattern, kernel.core_pipe_limit, fs.suid_dumpable), finds
// who else sets them at boot (sysctl.d files), names the crash handler a
// core_pattern belongs to, and says how the running values drift from what
// unwound needs. The handler, the uploader and `unwound-handler install`
// share it. It never imports net/http (the handler links it).
package sysctl

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The keys, as sysctl(8) and sysctl.d name them.
const (
	CorePattern  = "kernel.core_pattern"
	PipeLimit    = "kernel.core_pipe_limit"
	SuidDumpable = "fs.suid_dumpable"
)

// ProcSys is where the running kernel's settings live.
const ProcSys = "/proc/sys"

// ConfName is unwound's sysctl.d file: it sorts after systemd's
// 50-coredump.conf, so its core_pattern wins (docs/packaging.md).
const ConfName = "60-unwound.conf"

// WantSuidDumpable is the fs.suid_dumpable unwound needs: 2 also dumps
// processes that changed credentials (daemons dropping root).
const WantSuidDumpable = 2

// DefaultPipeLimit is the kernel.core_pipe_limit packages install: above
// the handler's default rate_limit.max_concurrent (2), so a crash storm is
// counted by the handler instead of dropped unseen by the kernel.
const DefaultPipeLimit = 4

// KernelDefault is the core_pattern of a kernel nobody configured.
const KernelDefault = "core"

// Path is the file under procSys that holds key.
func Path(procSys, key string) string {
	return filepath.Join(procSys, strings.ReplaceAll(key, ".", "/"))
}

// Values are the running settings; an empty string is a value that could
// not be read (Errs says why).
type Values struct {
	CorePattern  string
	PipeLimit    string
	SuidDumpable string
	Errs         []error
}

// Read reads the three settings from procSys.
func Read(procSys string) Values {
	var v Values
	for _, kv := range []struct {
		key string
		dst *string
	}{{CorePattern, &v.CorePattern}, {PipeLimit, &v.PipeLimit}, {SuidDumpable, &v.SuidDumpable}} {
		b, err := os.ReadFile(Path(procSys, kv.key))
		if err != nil {
			v.Errs = append(v.Errs, err)
			continue
		}
		*kv.dst = strings.TrimRight(string(b), "\n")
	}
	return v
}

// Write sets one key under procSys.
func Write(procSys, key, value string) error {
	f, err := os.OpenFile(Path(procSys, key), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s = %q: %w", key, value, err)
	}
	return nil
}

// Free says whether a core_pattern belongs to no crash handler: the
// kernel's default, or nothing.
func Free(pattern string) bool {
	p := strings.TrimSpace(pattern)
	return p == "" || p == KernelDefault
}

// Describe names what a core_pattern does, for messages: the crash
// handler it pipes to when it is a known one.
func Describe(pattern string) string {
	p := strings.TrimSpace(pattern)
	switch {
	case Free(p):
		return "the kernel's default (core files in the crashed process's directory)"
	case strings.HasPrefix(p, "@"):
		sock, _ := SocketPath(p)
		switch sock {
		case "/run/systemd/coredumpd/kernel":
			return "systemd-coredumpd's coredump socket (" + sock + ")"
		case DefaultSocket:
			return "unwound's coredump socket server (" + sock + ")"
		}
		return "the coredump socket " + sock
	case !strings.HasPrefix(p, "|"):
		return "core files written to " + p
	}
	prog := strings.Fields(p[1:])
	if len(prog) == 0 {
		return "an empty pipe"
	}
	base := path.Base(prog[0])
	for _, k := range []struct{ name, what string }{
		{"systemd-coredump", "systemd-coredump"},
		{"apport", "Ubuntu's apport"},
		{"abrt-hook-ccpp", "ABRT (abrt-hook-ccpp)"},
		{"unwound-handler", "another unwound-handler"},
		{"crashpad_handler", "Crashpad"},
		{"kdumpctl", "kdump"},
		{"core_pattern_handler", "a core_pattern handler"},
	} {
		if base == k.name {
			return fmt.Sprintf("%s (%s)", k.what, prog[0])
		}
	}
	return "the pipe helper " + prog[0]
}

// Same says whether two core_pattern lines run the same handler with the
// same arguments. Program paths are compared after resolving symlinks
// under root ("/" for the running system), so /usr/bin and /bin on a
// merged-/usr system are the same handler. A line with PidfdArg is the
// same as one without: install chooses it by kernel, and either works.
func Same(root, a, b string) bool {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if a == b {
		return true
	}
	// The server speaks "@" and "@@" alike.
	if sa, _ := SocketPath(a); sa != "" {
		sb, _ := SocketPath(b)
		return resolve(root, sa) == resolve(root, sb)
	}
	if !strings.HasPrefix(a, "|") || !strings.HasPrefix(b, "|") {
		return false
	}
	fa, fb := withoutPidfd(strings.Fields(a[1:])), withoutPidfd(strings.Fields(b[1:]))
	if len(fa) == 0 || len(fa) != len(fb) {
		return false
	}
	for i := 1; i < len(fa); i++ {
		if fa[i] != fb[i] {
			return false
		}
	}
	return resolve(root, fa[0]) == resolve(root, fb[0])
}

// withoutPidfd drops PidfdArg from a pipe line's words.
func withoutPidfd(f []string) []string {
	out := f[:0:0]
	for _, w := range f {
		if w != PidfdArg {
			out = append(out, w)
		}
	}
	return out
}

func resolve(root, p string) string {
	if root == "" {
		root = "/"
	}
	r, err := filepath.EvalSymlinks(filepath.Join(root, p))
	if err != nil {
		return filepath.Clean(p)
	}
	return r
}

// Handler returns the program and the --config argument of a pipe
// core_pattern ("" when it has none).
func Handler(pattern string) (prog, config string) {
	p := strings.TrimSpace(pattern)
	if !strings.HasPrefix(p, "|") {
		return "", ""
	}
	f := strings.Fields(p[1:])
	if len(f) == 0 {
		return "", ""
	}
	for i := 1; i+1 < len(f); i++ {
		if f[i] == "--config" || f[i] == "-config" {
			config = f[i+1]
		}
	}
	return f[0], config
}

// Want is what the running settings should be.
type Want struct {
	// CorePattern is the exact line (handler.CorePattern) when known. When
	// empty, any pipe to a program named unwound-handler with --config
	// Config is accepted (the uploader does not always know where the
	// handler is installed).
	CorePattern string
	Config      string
	// MaxConcurrent is rate_limit.max_concurrent: a core_pipe_limit at or
	// below it lets the kernel drop dumps before the handler counts them.
	MaxConcurrent int
	// Root resolves handler paths ("/" on the board).
	Root string
	// Socket is the coredump socket server's path (DefaultSocket when
	// empty): an "@@" or "@" core_pattern naming it is unwound's.
	Socket string
}

// socketDrift is the drift of a coredump socket pattern for sock: someone
// else's socket, or unwound's with nothing there (the kernel then drops
// every core without a word to anyone but its log).
func socketDrift(v Values, w Want, sock string) []string {
	want := w.Socket
	if want == "" {
		want = DefaultSocket
	}
	if sock != want {
		return []string{fmt.Sprintf("%s is %q: %s, not unwound (want %q); crashes do not reach unwound (another tool overwrote it? `unwound-handler install` says who)",
			CorePattern, v.CorePattern, Describe(v.CorePattern), "@@"+want)}
	}
	root := w.Root
	if root == "" {
		root = "/"
	}
	if fi, err := os.Stat(filepath.Join(root, sock)); err != nil || fi.Mode().Type() != os.ModeSocket {
		return []string{fmt.Sprintf("%s is %q but there is no socket at %s: the kernel drops every core (start unwound-coredump.socket, or unwound-handler --serve-coredump-socket %s)",
			CorePattern, v.CorePattern, sock, sock)}
	}
	if root == "/" {
		if b, err := os.ReadFile("/proc/net/unix"); err == nil && !UnixListening(b, sock) {
			return []string{fmt.Sprintf("%s is %q but nothing listens at %s (a server that stopped left it): the kernel drops every core (start unwound-coredump.socket, or unwound-handler --serve-coredump-socket %s)",
				CorePattern, v.CorePattern, sock, sock)}
		}
	}
	return nil
}

// UnixListening says whether /proc/net/unix (text) lists a listening
// socket bound at path: flag __SO_ACCEPTCON (0x10000). Read, never
// connected to: a connection would look like a crash to the server.
func UnixListening(text []byte, path string) bool {
	for _, l := range strings.Split(string(text), "\n") {
		f := strings.Fields(l)
		// Num RefCount Protocol Flags Type St Inode Path
		if len(f) < 8 || f[7] != path {
			continue
		}
		if flags, err := strconv.ParseUint(f[3], 16, 32); err == nil && flags&0x10000 != 0 {
			return true
		}
	}
	return false
}

// Drift lists, one sentence each, how v differs from w. Nothing: all well.
func Drift(v Values, w Want) []string {
	var out []string
	for _, err := range v.Errs {
		out = append(out, fmt.Sprintf("cannot read the kernel's crash settings: %v", err))
	}
	sock, request := SocketPath(v.CorePattern)
	if sock != "" {
		out = append(out, socketDrift(v, w, sock)...)
	} else if v.CorePattern != "" || len(v.Errs) == 0 {
		ok := false
		if w.CorePattern != "" {
			ok = Same(w.Root, v.CorePattern, w.CorePattern)
		} else {
			prog, cfg := Handler(v.CorePattern)
			ok = path.Base(prog) == "unwound-handler" && (w.Config == "" || cfg == w.Config)
		}
		if !ok {
			want := w.CorePattern
			if want == "" {
				want = "|…/unwound-handler --config " + w.Config + " …"
			}
			out = append(out, fmt.Sprintf("%s is %q: %s, not unwound (want %q); crashes do not reach unwound-handler (another tool overwrote it? `unwound-handler install` says who)",
				CorePattern, v.CorePattern, Describe(v.CorePattern), want))
		}
	}
	if v.SuidDumpable != "" && v.SuidDumpable != strconv.Itoa(WantSuidDumpable) {
		out = append(out, fmt.Sprintf("%s is %s, not %d: processes that changed credentials (daemons dropping root, setuid programs) are never dumped",
			SuidDumpable, v.SuidDumpable, WantSuidDumpable))
	}
	// core_pipe_limit: a pipe's count of dumps waited for; under "@" only
	// whether the kernel waits (fs/coredump.c); "@@" asks for itself.
	if v.PipeLimit != "" && !request {
		n, err := strconv.Atoi(v.PipeLimit)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("%s is %q, not a number", PipeLimit, v.PipeLimit))
		case n == 0:
			out = append(out, fmt.Sprintf("%s is 0: the kernel does not wait for the handler, and the crashed process may be gone before its stacks are read (want %d)",
				PipeLimit, DefaultPipeLimit))
		case sock == "" && w.MaxConcurrent > 0 && n <= w.MaxConcurrent:
			out = append(out, fmt.Sprintf("%s is %d, not above rate_limit.max_concurrent (%d): in a crash storm the kernel drops dumps before the handler can count them (want %d)",
				PipeLimit, n, w.MaxConcurrent, DefaultPipeLimit))
		}
	}
	return out
}

// KV is one sysctl.d assignment.
type KV struct{ Key, Value string }

// ParseConf reads a sysctl.d file the way systemd-sysctl and procps do:
// "key = value", '#' and ';' comments, '/' or '.' as separators, a leading
// '-' (ignore errors) dropped.
func ParseConf(text []byte) []KV {
	var out []KV
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		k = strings.TrimPrefix(strings.TrimSpace(k), "-")
		out = append(out, KV{strings.ReplaceAll(k, "/", "."), strings.TrimSpace(v)})
	}
	return out
}

// Lookup returns the last value of key in kvs.
func Lookup(kvs []KV, key string) (string, bool) {
	v, ok := "", false
	for _, kv := range kvs {
		if kv.Key == key {
			v, ok = kv.Value, true
		}
	}
	return v, ok
}

// Dirs are where sysctl.d files live, highest precedence first: a file in
// an earlier directory hides one of the same name in a later one
// (sysctl.d(5)).
var Dirs = []string{"/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d"}

// ConfFile is one file applied at boot.
type ConfFile struct {
	Path string // on the board (without root)
	Name string // the name it sorts by
	KVs  []KV
}

// BootFiles lists the sysctl files applied at boot under root, in the
// order they are applied (later files win): sysctl.d files by name, each
// name from its highest-precedence directory, then /etc/sysctl.conf
// (systemd applies it as 99-sysctl.conf; BusyBox and procps last too).
func BootFiles(root string) []ConfFile {
	byName := map[string]ConfFile{}
	for _, d := range Dirs {
		ents, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".conf") || e.IsDir() {
				continue
			}
			if _, ok := byName[e.Name()]; ok {
				continue
			}
			p := path.Join(d, e.Name())
			b, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				continue
			}
			byName[e.Name()] = ConfFile{Path: p, Name: e.Name(), KVs: ParseConf(b)}
		}
	}
	var out []ConfFile
	for _, f := range byName {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if b, err := os.ReadFile(filepath.Join(root, "/etc/sysctl.conf")); err == nil {
		// systemd's 99-sysctl.conf is a symlink to it: count it once.
		if f, ok := byName["99-sysctl.conf"]; !ok || resolve(root, f.Path) != resolve(root, "/etc/sysctl.conf") {
			out = append(out, ConfFile{Path: "/etc/sysctl.conf", Name: "\xff/etc/sysctl.conf", KVs: ParseConf(b)})
		}
	}
	return out
}
