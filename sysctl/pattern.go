package sysctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PatternSpecifiers are the core_pattern specifiers the handler takes, in
// order: global pid, global tid of the crashing thread, signal, dump time,
// dumpable mode, RLIMIT_CORE, executable path with '/' as '!', and the
// thread's comm last, because kernels before 5.3 split the expanded pattern
// on spaces and a comm may contain them.
const PatternSpecifiers = "%P %I %s %t %d %c %E %e"

// MaxPattern is the kernel's limit on core_pattern (CORENAME_MAX_SIZE − 1).
const MaxPattern = 127

// PidfdArg asks the kernel for the crashed process's pidfd: %F (Linux
// 6.16, fs/coredump.c) installs it as a file descriptor of the handler and
// expands to its number. It is one word, so a kernel that does not know %F
// (it expands unknown specifiers to nothing) passes "--pidfd=", which the
// handler takes as no pidfd.
const PidfdArg = "--pidfd=%F"

// PidfdKernel is the first kernel release whose pipe helpers get %F.
var PidfdKernel = [2]int{6, 16}

// Pattern returns the line to write into /proc/sys/kernel/core_pattern,
// without %F.
func Pattern(exe, configPath string) (string, error) {
	return PatternFor(exe, configPath, false)
}

// PatternFor returns the line to write into /proc/sys/kernel/core_pattern;
// with pidfd it asks for the crashed process's pidfd (PidfdArg).
func PatternFor(exe, configPath string, pidfd bool) (string, error) {
	if !filepath.IsAbs(exe) {
		return "", fmt.Errorf("core_pattern needs an absolute handler path, got %q", exe)
	}
	if strings.ContainsAny(exe+configPath, " \t\n%") {
		return "", fmt.Errorf("core_pattern: the kernel splits on spaces and expands %%: paths %q and %q must contain neither", exe, configPath)
	}
	p := "|" + exe
	if configPath != "" {
		p += " --config " + configPath
	}
	if pidfd {
		p += " " + PidfdArg
	}
	p += " " + PatternSpecifiers
	if len(p) > MaxPattern {
		return "", fmt.Errorf("core_pattern is %d characters, the kernel keeps %d: install the handler at a shorter path", len(p), MaxPattern)
	}
	return p, nil
}

// KernelRelease is the running kernel's release (uname -r).
func KernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// PidfdSupported says whether a kernel release ("6.18.44-fc-v657",
// "7.2.0-rc1") passes pidfds to pipe helpers: 6.16 or later. A release it
// cannot read is taken as too old.
func PidfdSupported(release string) bool { return atLeast(release, PidfdKernel) }

// atLeast says whether a kernel release is v or later; a release it
// cannot read is taken as older.
func atLeast(release string, v [2]int) bool {
	major, rest, _ := strings.Cut(release, ".")
	minor, _, _ := strings.Cut(rest, ".")
	if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = minor[:i] // "16-rc1", "17rc2"
	}
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > v[0] || ma == v[0] && mi >= v[1]
}

// ChoosePidfd decides whether the line asks for a pidfd: mode "on" and
// "off" say so (a build for an image whose kernel is known), "auto" (or
// "") asks the kernel release given, the running one when it is "".
func ChoosePidfd(mode, release string) (bool, error) {
	switch mode {
	case "on":
		return true, nil
	case "off":
		return false, nil
	case "auto", "":
		if release == "" {
			release = KernelRelease()
		}
		return PidfdSupported(release), nil
	}
	return false, fmt.Errorf("pidfd %q: want auto, on or off", mode)
}

// PatternMode is the line for a --pidfd mode (ChoosePidfd). "auto" drops
// the pidfd when the line would not fit the kernel's 127 characters with
// it: the pidfd guards against a reused pid, the line is what makes
// crashes reach the handler at all. "on" fails then.
func PatternMode(exe, configPath, mode, release string) (string, error) {
	pidfd, err := ChoosePidfd(mode, release)
	if err != nil {
		return "", err
	}
	p, err := PatternFor(exe, configPath, pidfd)
	if err != nil && pidfd && mode != "on" {
		if without, err2 := PatternFor(exe, configPath, false); err2 == nil {
			return without, nil
		}
	}
	return p, err
}

// Executable is the running program's own absolute path, symlinks
// resolved: what a core_pattern line must name.
func Executable() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}

// Check says how the kernel's crash settings under procSys (default
// /proc/sys) differ from what the handler at handlerExe with configPath
// needs: core_pattern not its own line (another tool overwrote it),
// fs.suid_dumpable not 2, core_pipe_limit 0 or not above maxConcurrent.
// With handlerExe empty any unwound-handler with configPath will do.
func Check(procSys, handlerExe, configPath string, maxConcurrent int) []string {
	if procSys == "" {
		procSys = ProcSys
	}
	want := Want{Config: configPath, MaxConcurrent: maxConcurrent, Root: "/", Socket: os.Getenv(SocketEnv)}
	if handlerExe != "" {
		if p, err := Pattern(handlerExe, configPath); err == nil {
			want.CorePattern = p
		}
	}
	return Drift(Read(procSys), want)
}

// DefaultSocket is where the coredump socket server listens (the systemd
// socket unit, the init script, `install --socket`): under /run, which
// holds no symbolic link on the way (the kernel follows none).
const DefaultSocket = "/run/unwound/coredump.sock"

// SocketEnv names the socket the coredump socket server listens on, in
// its environment and its children's, so that their drift check (Check)
// takes a socket elsewhere than DefaultSocket as unwound's.
const SocketEnv = "UNWOUND_COREDUMP_SOCKET"

// SocketKernel is the first kernel release with the coredump socket
// ("@/path"); SocketRequestKernel the first with its request protocol
// ("@@/path"), which the server prefers: it asks the kernel to hold the
// task until the stacks are read, whatever core_pipe_limit says.
var (
	SocketKernel        = [2]int{6, 16}
	SocketRequestKernel = [2]int{6, 17}
)

// SocketPattern is the core_pattern for a coredump socket server at path:
// "@@path" with request, else "@path".
func SocketPattern(path string, request bool) (string, error) {
	if !filepath.IsAbs(path) || strings.Contains(path, "..") {
		return "", fmt.Errorf("coredump socket %q: the kernel takes an absolute path without \"..\"", path)
	}
	if len(path) >= 108 { // UNIX_PATH_MAX
		return "", fmt.Errorf("coredump socket %q: longer than a socket address holds (107 bytes)", path)
	}
	if request {
		return "@@" + path, nil
	}
	return "@" + path, nil
}

// SocketPath is the socket of an "@path" or "@@path" core_pattern (request
// for "@@"), "" for any other pattern.
func SocketPath(pattern string) (path string, request bool) {
	p := strings.TrimSpace(pattern)
	if strings.HasPrefix(p, "@@") {
		return p[2:], true
	}
	if strings.HasPrefix(p, "@") {
		return p[1:], false
	}
	return "", false
}

// SocketSupported says which coredump socket patterns a kernel release
// takes: "@" (plain) from 6.16, "@@" (request) from 6.17.
func SocketSupported(release string) (plain, request bool) {
	return atLeast(release, SocketKernel), atLeast(release, SocketRequestKernel)
}

// ChooseSocket is the coredump socket pattern for a socket mode, "" for
// the pipe: "off" (or "") never a socket; "@@" and "@" that form (a build
// for an image whose kernel is known); "on" the best form the kernel
// release takes ("@@" from 6.17, "@" on 6.16), an error before; "auto" the
// same, the pipe before 6.16. release "" is the running kernel's.
func ChooseSocket(mode, release, path string) (string, error) {
	if path == "" {
		path = DefaultSocket
	}
	switch mode {
	case "off", "":
		return "", nil
	case "@@", "@":
		return SocketPattern(path, mode == "@@")
	case "on", "auto":
		if release == "" {
			release = KernelRelease()
		}
		plain, request := SocketSupported(release)
		switch {
		case request || plain:
			return SocketPattern(path, request)
		case mode == "auto":
			return "", nil
		}
		return "", fmt.Errorf("socket on: kernel %s has no coredump socket (6.16 or later has)", release)
	}
	return "", fmt.Errorf("socket %q: want auto, on, off, @@ or @", mode)
}
