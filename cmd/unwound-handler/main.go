// Command unwound-handler is unwound's core_pattern helper: the kernel
// pipes a crashed process's core into it; it unwinds every thread on the
// device and queues a PC-only report. See README.md.
//
// Kernel mode (what core_pattern runs; --pidfd=%F on Linux 6.16+):
//
//	unwound-handler --config /etc/unwound/unwound.toml [--pidfd=%F] %P %I %s %t %d %c %E %e
//
// Tried by hand with a core file on standard input (`... %e < core`), the
// file is read as one, and the report queued as the kernel's would be.
//
// Install line:  unwound-handler --config PATH [--pidfd auto|on|off] [--socket auto|on|off|@@|@] --core-pattern
// Install:       unwound-handler [--config PATH] install [--root DIR] [--force] [--core-pipe-limit N] [--pidfd auto|on|off] [--socket auto|on|off|@@|@]
// Uninstall:     unwound-handler [--config PATH] uninstall [--root DIR] [--force]
// Offline:       unwound-handler --core-file FILE|- [--exe PATH] [--sysroot DIR] --print-json
// Socket server: unwound-handler [--config PATH] --serve-coredump-socket PATH   (core_pattern @@PATH, Linux 6.16+)
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/handler/install"
	"github.com/unwound-dev/unwound/internal/version"
	"github.com/unwound-dev/unwound/sysctl"
)

// definer is what defines the options: *flagSet here, *flag.FlagSet in
// the test that checks both parse alike.
type definer interface {
	String(name, value, usage string) *string
	Bool(name string, value bool, usage string) *bool
	IntVar(p *int, name string, value int, usage string)
}

type mainOptions struct {
	config, coreFile, exe, sysroot *string
	pidfd, serve, socket           *string
	pattern, printJSON, version    *bool
}

func defineMain(fs definer) mainOptions {
	return mainOptions{
		config:    fs.String("config", config.DefaultPath, "configuration `file`"),
		pattern:   fs.Bool("core-pattern", false, "print the core_pattern line that installs this binary, and exit"),
		pidfd:     fs.String("pidfd", "", "kernel mode: the `fd` %F gave, the crashed process's pidfd (Linux 6.16+); with --core-pattern: auto (the running kernel decides), on or off"),
		socket:    fs.String("socket", "off", "with --core-pattern: point core_pattern at the coredump socket server ("+sysctl.DefaultSocket+"): `auto` (when the running kernel has the socket: 6.16+), on, @@, @ or off"),
		serve:     fs.String("serve-coredump-socket", "", "run as the coredump socket server on `path` (core_pattern @@path, Linux 6.17+; @path on 6.16); systemd's socket, when it passes one, wins"),
		coreFile:  fs.String("core-file", "", "offline: read this core `file` (- for stdin) instead of the kernel's pipe"),
		exe:       fs.String("exe", "", "offline: the crashed `program`, for cores without NT_FILE"),
		sysroot:   fs.String("sysroot", "/", "offline: `dir`ectory the core's file paths are relative to"),
		printJSON: fs.Bool("print-json", false, "offline: print the report as JSON on stdout"),
		version:   fs.Bool("version", false, "print the version and exit"),
	}
}

func mainUsage(w io.Writer, printDefaults func()) {
	fmt.Fprintf(w, "usage:\n  unwound-handler [--config FILE] %s   (from core_pattern)\n"+
		"  unwound-handler [--config FILE] [--pidfd auto|on|off] [--socket auto|on|off|@@|@] --core-pattern\n"+
		"  unwound-handler [--config FILE] install [--root DIR] [--force] [--core-pipe-limit N] [--pidfd auto|on|off] [--socket auto|on|off|@@|@]\n"+
		"  unwound-handler [--config FILE] uninstall [--root DIR] [--force]\n"+
		"  unwound-handler [--config FILE] --serve-coredump-socket PATH\n"+
		"  unwound-handler --core-file FILE|- [--exe PROGRAM] [--sysroot DIR] --print-json\n\nflags:\n", sysctl.PatternSpecifiers)
	printDefaults()
}

// defineInstall defines the options of install and uninstall.
func defineInstall(fs definer, cmd, cfgPath string) (root *string, force *bool, cfg *string, limit *int, pidfd, socket *string) {
	root = fs.String("root", "/", "the board's root `dir`ectory; other than /, files are written there and nothing is applied to the running kernel")
	force = fs.Bool("force", false, "replace another crash handler's core_pattern (install), remove a sysctl file install did not write (uninstall)")
	cfg = fs.String("config", cfgPath, "configuration `file` on the board")
	limit = new(int)
	if cmd == "install" {
		fs.IntVar(limit, "core-pipe-limit", 4, "kernel.core_pipe_limit: `dumps` the kernel waits for at once")
	}
	pidfd = new(string)
	if cmd == "install" {
		pidfd = fs.String("pidfd", "auto", "ask the kernel for the crashed process's pidfd (%F): `auto` (the running kernel is 6.16 or later; off for another --root), on or off")
	}
	socket = new(string)
	if cmd == "install" {
		socket = fs.String("socket", "off", "point core_pattern at the coredump socket server ("+sysctl.DefaultSocket+") instead of the pipe: `auto` (the running kernel has the socket, 6.16+; off for another --root), on, @@ (6.17+), @ (6.16) or off")
	}
	return root, force, cfg, limit, pidfd, socket
}

func main() {
	os.Exit(run())
}

// kernelLogger is /dev/kmsg (fds 1 and 2 are closed under core_pattern),
// or stderr when UNWOUND_LOG_STDERR is set (tests: the kernel passes no
// environment).
func kernelLogger() *handler.Logger {
	if os.Getenv("UNWOUND_LOG_STDERR") != "" {
		return handler.NewLogger(os.Stderr)
	}
	return handler.NewKmsgLogger()
}

func run() int {
	if len(os.Args) > 1 && os.Args[1] == handler.ChildFlag {
		// The supervised child (handler/supervise.go): not a user command.
		return handler.RunChild(handler.ChildOptions{
			Args: os.Args[2:], Stdin: os.Stdin, Log: kernelLogger(),
			Handoff: os.NewFile(3, "handoff"), Status: os.NewFile(4, "status"),
		})
	}
	fs := newFlagSet("unwound-handler", os.Stderr)
	o := defineMain(fs)
	fs.usage = func() { mainUsage(fs.out, fs.PrintDefaults) }
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == errHelp {
			return 0
		}
		return 2
	}
	switch {
	case *o.version:
		fmt.Println("unwound-handler", version.Version)
		return 0
	case *o.pattern:
		self, err := sysctl.Executable()
		if err == nil {
			var line string
			line, err = sysctl.ChooseSocket(*o.socket, "", "")
			if line == "" && err == nil {
				line, err = sysctl.PatternMode(self, *o.config, *o.pidfd, "")
			}
			if err == nil {
				fmt.Println(line)
				return 0
			}
		}
		fmt.Fprintln(os.Stderr, "unwound-handler:", err)
		return 1
	case *o.serve != "":
		return handler.Serve(handler.ServeOptions{
			ConfigPath: *o.config, Socket: *o.serve, Self: selfExe(), Log: kernelLogger(),
		})
	case *o.coreFile != "":
		return offline(*o.coreFile, *o.exe, *o.sysroot, *o.config, *o.printJSON)
	}
	if fs.NArg() == 0 {
		fs.showUsage()
		return 2
	}
	if cmd := fs.Arg(0); cmd == "install" || cmd == "uninstall" {
		return installCmd(cmd, *o.config, fs.Args()[1:])
	}
	return handler.RunKernel(handler.KernelOptions{
		Self:       selfExe(),
		ConfigPath: *o.config,
		Args:       fs.Args(),
		Stdin:      os.Stdin,
		Pidfd:      *o.pidfd,
		Log:        kernelLogger(),
	})
}

func offline(core, exe, sysroot, cfgPath string, printJSON bool) int {
	lg := handler.NewLogger(os.Stderr)
	cfg, cfgErr := config.LoadOrDefault(cfgPath)
	if cfgErr != nil {
		lg.Warnf("%v", cfgErr)
	}
	r, err := handler.Offline(handler.OfflineOptions{
		CoreFile: core, Exe: exe, Sysroot: sysroot, Config: cfg, ConfigErr: cfgErr, LimitMemory: true, Log: lg, Stdin: os.Stdin,
	})
	if err != nil {
		lg.Errorf("%v", err)
		return 1
	}
	if printJSON {
		if err := handler.PrintJSON(os.Stdout, r); err != nil {
			lg.Errorf("%v", err)
			return 1
		}
	}
	return 0
}

// installCmd is `install` and `uninstall`: see package install.
func installCmd(cmd, cfgPath string, args []string) int {
	fs := newFlagSet("unwound-handler "+cmd, os.Stderr)
	root, force, cfg, limit, pidfd, socket := defineInstall(fs, cmd, cfgPath)
	if err := fs.Parse(args); err != nil {
		if err == errHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unwound-handler %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	o := install.Options{Root: *root, Config: *cfg, PipeLimit: *limit, Force: *force, Pidfd: *pidfd, Socket: *socket, Out: os.Stdout}
	run := install.Install
	if cmd == "uninstall" {
		run = install.Uninstall
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "unwound-handler %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// selfExe is the supervised child's binary: this very one, through
// /proc/self/exe, so a package upgrade replacing the file mid-crash does
// not mix versions.
func selfExe() string {
	self := "/proc/self/exe"
	if _, err := os.Stat(self); err != nil {
		self, _ = os.Executable()
	}
	return self
}
