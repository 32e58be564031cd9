// Package install is `unwound-handler install` and `uninstall`: installing
// the handler on a board without a build system. Install first runs the
// self-test (the handler unwinds a synthetic core for this board's
// architecture), then writes /etc/sysctl.d/60-unwound.conf (the same three
// settings `make install` writes: core_pattern from handler.CorePattern,
// core_pipe_limit, fs.suid_dumpable = 2) and, on the running system,
// applies them at once. It refuses to replace another crash handler's
// core_pattern, live or set at boot by another sysctl file, unless forced,
// and says which handler is there. Uninstall removes what install wrote and
// puts back the settings it found.
package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/kuser"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/sysctl"
)

// ConfPath is the file install writes, on the board.
const ConfPath = "/etc/sysctl.d/" + sysctl.ConfName

// Marker is the first line of the file install writes; uninstall removes
// only a file that starts with it (unless forced).
const Marker = "# unwound: written by `unwound-handler install`; `unwound-handler uninstall` removes it."

// previousTag prefixes the comment lines that record the settings found
// before install, which uninstall puts back.
const previousTag = "#@previous "

// Options drive Install and Uninstall.
type Options struct {
	// Root is the board's root directory: "/" on the board itself, or a
	// staged root filesystem (then nothing is applied to a kernel).
	Root string
	// ProcSys is where the settings are applied now. Empty: "/proc/sys"
	// when Root is "/", else nothing is applied.
	ProcSys string
	// Exe is the handler's path on the host running install; it must lie
	// under Root. Empty: this executable.
	Exe string
	// Config is the configuration's path on the board.
	Config string
	// PipeLimit is kernel.core_pipe_limit; 0 means sysctl.DefaultPipeLimit.
	PipeLimit int
	// Force replaces another handler's core_pattern, and removes a
	// sysctl file install did not write.
	Force bool
	// Pidfd says whether the line asks for the crashed process's pidfd
	// (%F): "on", "off", or "auto" (or ""): on when the running kernel is
	// 6.16 or later, off for a staged root (its kernel is not this one).
	Pidfd string
	// Socket points core_pattern at the coredump socket server instead of
	// the pipe (sysctl.ChooseSocket): "off" (or ""), "auto" (the running
	// kernel has the socket, 6.16+; off for a staged root), "on", or the
	// form itself, "@@" (6.17+) or "@" (6.16).
	Socket string
	// SocketPath is where the server listens (sysctl.DefaultSocket).
	SocketPath string
	// KernelRelease is the release "auto" decides by; "" is the running
	// kernel's (tests set it).
	KernelRelease string
	// SkipSelfTest is for tests of the file handling only.
	SkipSelfTest bool
	// Out receives what install does, one line per step.
	Out io.Writer
}

func (o *Options) norm() error {
	if o.Root == "" {
		o.Root = "/"
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return err
	}
	o.Root = root
	if o.ProcSys == "" && o.Root == "/" {
		o.ProcSys = sysctl.ProcSys
	}
	if o.Config == "" {
		o.Config = config.DefaultPath
	}
	if o.PipeLimit == 0 {
		o.PipeLimit = sysctl.DefaultPipeLimit
	}
	if o.PipeLimit < 1 {
		return fmt.Errorf("core_pipe_limit %d: want at least 1 (0 lets the process go before its stacks are read)", o.PipeLimit)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return nil
}

//go:noinline
func (o *Options) say(format string, args ...any) {
	fmt.Fprintf(o.Out, format+"\n", args...)
}

// onBoard is p (a host path under Root) as the board sees it.
func (o *Options) onBoard(p string) (string, error) {
	if o.Root == "/" {
		return p, nil
	}
	rel, err := filepath.Rel(o.Root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("the handler %s is not inside --root %s: copy it there first (or use make install DESTDIR=)", p, o.Root)
	}
	return "/" + rel, nil
}

func (o *Options) host(boardPath string) string { return filepath.Join(o.Root, boardPath) }

// Pattern is the core_pattern line for the handler install runs as.
func (o *Options) Pattern() (string, error) {
	exe := o.Exe
	if exe == "" {
		var err error
		if exe, err = sysctl.Executable(); err != nil {
			return "", err
		}
	} else if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	if o.Root != "/" {
		if r, err := filepath.EvalSymlinks(o.Root); err == nil {
			o.Root = r
		}
	}
	board, err := o.onBoard(exe)
	if err != nil {
		return "", err
	}
	smode := o.Socket
	if o.Root != "/" {
		// A staged root boots another kernel: the image's build says
		// (make install CORE_PATTERN_SOCKET=@@).
		switch smode {
		case "auto":
			smode = "off"
		case "on":
			smode = "@@"
		}
	}
	if p, err := sysctl.ChooseSocket(smode, o.KernelRelease, o.SocketPath); p != "" || err != nil {
		return p, err
	}
	mode := o.Pidfd
	if (mode == "auto" || mode == "") && o.Root != "/" {
		// A staged root boots another kernel: the image's build says
		// (make install CORE_PATTERN_PIDFD=on).
		mode = "off"
	}
	return sysctl.PatternMode(board, o.Config, mode, o.KernelRelease)
}

// Foreign is another handler's core_pattern that install would replace.
type Foreign struct {
	Where string // "running kernel" or a sysctl file on the board
	Value string
	Later bool // a boot file applied after ours: it wins at boot whatever we do
}

func (f Foreign) String() string {
	s := fmt.Sprintf("%s sets kernel.core_pattern = %s: %s", f.Where, f.Value, sysctl.Describe(f.Value))
	if f.Later {
		s += "; it is applied after " + sysctl.ConfName + " and would override it at every boot: remove that line"
	}
	return s
}

// Foreigns lists who else sets core_pattern, live and at boot.
func (o *Options) Foreigns(pattern string) []Foreign {
	var out []Foreign
	if o.ProcSys != "" {
		v := sysctl.Read(o.ProcSys)
		if !sysctl.Free(v.CorePattern) && !sysctl.Same(o.Root, v.CorePattern, pattern) && len(v.Errs) == 0 {
			out = append(out, Foreign{Where: "the running kernel", Value: v.CorePattern})
		}
	}
	for _, f := range sysctl.BootFiles(o.Root) {
		val, ok := sysctl.Lookup(f.KVs, sysctl.CorePattern)
		if f.Path == ConfPath {
			if !isOurs(o.host(ConfPath)) {
				out = append(out, Foreign{Where: ConfPath + " (not written by unwound-handler install)", Value: val})
			}
			continue
		}
		if !ok || sysctl.Free(val) || sysctl.Same(o.Root, val, pattern) {
			continue
		}
		out = append(out, Foreign{Where: f.Path, Value: val, Later: f.Name > sysctl.ConfName})
	}
	return out
}

func isOurs(p string) bool {
	b, err := os.ReadFile(p)
	return err == nil && bytes.HasPrefix(b, []byte(Marker+"\n"))
}

// Render is the file install writes.
func Render(pattern, exe, cfg string, pipeLimit int, previous []sysctl.KV) []byte {
	var b bytes.Buffer
	fmt.Fprintln(&b, Marker)
	fmt.Fprintln(&b, "# Sorts after systemd's 50-coredump.conf, so this core_pattern wins.")
	if sock, _ := sysctl.SocketPath(pattern); sock != "" {
		fmt.Fprintf(&b, "# The coredump socket server listens at %s (unwound-coredump.socket, or the\n", sock)
		fmt.Fprintln(&b, "# init script: `unwound-handler --serve-coredump-socket PATH`); docs/kernel-modes.md.")
	} else {
		fmt.Fprintf(&b, "# The line is what `%s --config %s --core-pattern` prints.\n", exe, cfg)
	}
	fmt.Fprintf(&b, "%s = %s\n", sysctl.CorePattern, pattern)
	fmt.Fprintln(&b, "# The kernel waits for the handler (and keeps /proc/<pid> readable) for up to")
	fmt.Fprintln(&b, "# this many dumps at once, and silently skips dumps beyond it. 0: no waiting.")
	fmt.Fprintf(&b, "%s = %d\n", sysctl.PipeLimit, pipeLimit)
	fmt.Fprintln(&b, "# 2: also dump processes that changed credentials (daemons dropping root,")
	fmt.Fprintln(&b, "# setuid programs); the handler runs as root and keeps no memory.")
	fmt.Fprintf(&b, "%s = %d\n", sysctl.SuidDumpable, sysctl.WantSuidDumpable)
	if len(previous) > 0 {
		fmt.Fprintln(&b, "# The running kernel's settings before install (uninstall puts them back):")
		for _, kv := range previous {
			fmt.Fprintf(&b, "%s%s = %s\n", previousTag, kv.Key, kv.Value)
		}
	}
	return b.Bytes()
}

func previousOf(text []byte) []sysctl.KV {
	var out []sysctl.KV
	for _, l := range strings.Split(string(text), "\n") {
		if rest, ok := strings.CutPrefix(l, previousTag); ok {
			if k, v, ok := strings.Cut(rest, " = "); ok {
				out = append(out, sysctl.KV{Key: k, Value: v})
			}
		}
	}
	return out
}

// ErrForeign is returned when another handler's core_pattern is in the way.
var ErrForeign = errors.New("another crash handler is installed")

// Install runs the self-test, writes the sysctl file and applies it.
func Install(o Options) error {
	if err := o.norm(); err != nil {
		return err
	}
	pattern, err := o.Pattern()
	if err != nil {
		return err
	}
	exeOnBoard, _ := sysctl.Handler(pattern)
	cfg, err := config.Load(o.host(o.Config))
	switch {
	case errors.Is(err, os.ErrNotExist):
		o.say("configuration %s: none, the handler uses the defaults (configs/unwound.toml documents them)", o.Config)
		cfg = config.Default()
	case err != nil:
		return fmt.Errorf("configuration: %w", err)
	}

	// What is there now, before anything changes.
	if o.ProcSys != "" {
		v := sysctl.Read(o.ProcSys)
		for _, d := range sysctl.Drift(v, sysctl.Want{CorePattern: pattern, MaxConcurrent: cfg.RateLimit.MaxConcurrent, Root: o.Root}) {
			o.say("now: %s", d)
		}
	}

	if !o.SkipSelfTest {
		a, err := BoardArch()
		if err != nil {
			return err
		}
		st, err := SelfTest(a)
		if err != nil {
			return err
		}
		o.say("self-test: unwound a synthetic %s core: %d frames, report %d bytes, %v", st.Arch, st.Frames, st.ReportSize, st.Duration.Round(100_000))
	}

	if runtime.GOARCH == "arm" {
		if f, err := os.Open("/proc/self/maps"); err == nil {
			o.say("%s", KuserNote(f, kuser.Needed()))
			f.Close()
		}
	}

	foreign := o.Foreigns(pattern)
	if len(foreign) > 0 && !o.Force {
		var lines []string
		for _, f := range foreign {
			lines = append(lines, "  "+f.String())
		}
		return fmt.Errorf("%w:\n%s\nnothing changed; `unwound-handler install --force` replaces it (uninstall puts the running kernel's settings back)",
			ErrForeign, strings.Join(lines, "\n"))
	}
	for _, f := range foreign {
		o.say("replacing: %s", f)
	}

	// The queue: created like a package would, then checked as the
	// handler will (exists, writable, persistent unless allowed).
	qdir := o.host(cfg.Queue.Dir)
	if _, err := os.Stat(qdir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(qdir), 0o755); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
		if err := os.Mkdir(qdir, 0o700); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
		o.say("queue: created %s (0700)", cfg.Queue.Dir)
	}
	if _, err := queue.Open(qdir, queue.FromConfig(cfg.Queue)); err != nil {
		return err
	}

	// The settings found before install, for uninstall: from an earlier
	// install's file when there is one (ours are not worth keeping).
	conf := o.host(ConfPath)
	var previous []sysctl.KV
	old, oldErr := os.ReadFile(conf)
	if oldErr == nil && isOurs(conf) {
		previous = previousOf(old)
	} else if o.ProcSys != "" {
		v := sysctl.Read(o.ProcSys)
		if len(v.Errs) > 0 {
			return fmt.Errorf("reading the running kernel's settings: %w", errors.Join(v.Errs...))
		}
		previous = []sysctl.KV{{Key: sysctl.CorePattern, Value: v.CorePattern}, {Key: sysctl.PipeLimit, Value: v.PipeLimit}, {Key: sysctl.SuidDumpable, Value: v.SuidDumpable}}
	}
	text := Render(pattern, exeOnBoard, o.Config, o.PipeLimit, previous)
	if err := writeAtomic(conf, text); err != nil {
		return err
	}
	o.say("wrote %s: %s = %s, %s = %d, %s = %d", ConfPath, sysctl.CorePattern, pattern, sysctl.PipeLimit, o.PipeLimit, sysctl.SuidDumpable, sysctl.WantSuidDumpable)
	if !o.appliedAtBoot() {
		o.say("warning: nothing on this system applies /etc/sysctl.d at boot (Yocto's sysvinit reads only /etc/sysctl.conf): the settings hold until reboot; install the package's init script, or run `unwound-handler install` at boot")
	}
	if o.ProcSys == "" {
		o.say("not applied now (--root %s): the board applies %s at boot", o.Root, ConfPath)
		return nil
	}
	// core_pattern last: once the kernel pipes to the handler, the other
	// two must already hold.
	err = apply(o.ProcSys, []sysctl.KV{
		{Key: sysctl.PipeLimit, Value: strconv.Itoa(o.PipeLimit)},
		{Key: sysctl.SuidDumpable, Value: strconv.Itoa(sysctl.WantSuidDumpable)},
		{Key: sysctl.CorePattern, Value: pattern},
	})
	if err != nil {
		// Leave the board as it was: the old file (or none), and
		// whatever of the old settings can be written back.
		if oldErr == nil {
			writeAtomic(conf, old)
		} else {
			os.Remove(conf)
		}
		apply(o.ProcSys, previous)
		return fmt.Errorf("applying the settings (are you root?): %w", err)
	}
	o.say("applied to the running kernel (%s)", o.ProcSys)
	if sock, _ := sysctl.SocketPath(pattern); sock != "" {
		if fi, err := os.Stat(o.host(sock)); err != nil || fi.Mode().Type() != os.ModeSocket {
			o.say("warning: no coredump socket at %s yet: the kernel drops every core until the server listens (systemctl enable --now unwound-coredump.socket, or the init script)", sock)
		}
	}
	return nil
}

// BootAppliers are the programs that apply /etc/sysctl.d at boot:
// systemd-sysctl, Buildroot's BusyBox S02sysctl, Debian's procps script.
var BootAppliers = []string{"/lib/systemd/systemd-sysctl", "/usr/lib/systemd/systemd-sysctl", "/etc/init.d/S02sysctl", "/etc/init.d/procps"}

func (o *Options) appliedAtBoot() bool {
	for _, p := range BootAppliers {
		if _, err := os.Stat(o.host(p)); err == nil {
			return true
		}
	}
	return false
}

func apply(procSys string, kvs []sysctl.KV) error {
	var errs []error
	for _, kv := range kvs {
		if err := sysctl.Write(procSys, kv.Key, kv.Value); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Uninstall removes the file install wrote and, on the running system,
// puts back the settings install found, where they are still ours.
func Uninstall(o Options) error {
	if err := o.norm(); err != nil {
		return err
	}
	conf := o.host(ConfPath)
	text, err := os.ReadFile(conf)
	if errors.Is(err, os.ErrNotExist) {
		o.say("%s: not there, nothing to remove", ConfPath)
		return nil
	}
	if err != nil {
		return err
	}
	if !isOurs(conf) && !o.Force {
		return fmt.Errorf("%s was not written by unwound-handler install (a package's file?): left in place; remove the package, or --force", ConfPath)
	}
	kvs := sysctl.ParseConf(text)
	ours, _ := sysctl.Lookup(kvs, sysctl.CorePattern)
	if o.ProcSys != "" {
		live := sysctl.Read(o.ProcSys)
		if len(live.Errs) > 0 {
			return fmt.Errorf("reading the running kernel's settings: %w", errors.Join(live.Errs...))
		}
		previous := previousOf(text)
		prev := func(key, dflt string) string {
			if v, ok := sysctl.Lookup(previous, key); ok {
				return v
			}
			return dflt
		}
		if sysctl.Same(o.Root, live.CorePattern, ours) {
			var back []sysctl.KV
			// The other two only when install changed them and nobody
			// changed them since.
			for _, k := range []struct{ key, live string }{{sysctl.PipeLimit, live.PipeLimit}, {sysctl.SuidDumpable, live.SuidDumpable}} {
				if v, ok := sysctl.Lookup(kvs, k.key); ok && v == k.live {
					if p, ok := sysctl.Lookup(previous, k.key); ok {
						back = append(back, sysctl.KV{Key: k.key, Value: p})
					}
				}
			}
			back = append(back, sysctl.KV{Key: sysctl.CorePattern, Value: prev(sysctl.CorePattern, sysctl.KernelDefault)})
			if err := apply(o.ProcSys, back); err != nil {
				return fmt.Errorf("restoring the settings (are you root?): %w", err)
			}
			for _, kv := range back {
				o.say("restored %s = %s", kv.Key, kv.Value)
			}
		} else {
			o.say("running kernel: %s = %s (%s) is not ours: left as it is", sysctl.CorePattern, live.CorePattern, sysctl.Describe(live.CorePattern))
		}
	}
	if err := os.Remove(conf); err != nil {
		return err
	}
	o.say("removed %s (the queue and the configuration stay)", ConfPath)
	return nil
}

func writeAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := path.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// KuserNote says what install found about the ARM kernel's user helpers,
// from a 32-bit ARM process's maps: whether GOARM=5/6 builds of unwound can
// run on this kernel. needed says this binary is such a build (it could
// not have started without the helpers, but its maps are read all the
// same).
func KuserNote(maps io.Reader, needed bool) string {
	err := kuser.Check(maps)
	switch {
	case err == nil && needed:
		return "kernel user helpers: present ([vectors]); this GOARM=5/6 build needs them: a kernel built with CONFIG_KUSER_HELPERS=n would stop it from starting"
	case err == nil:
		return "kernel user helpers: present ([vectors]): GOARM=5/6 builds of unwound would run too"
	case errors.Is(err, kuser.ErrMissing):
		return "warning: " + err.Error() + "; this build does not need them"
	}
	return "kernel user helpers: could not tell: " + err.Error()
}
