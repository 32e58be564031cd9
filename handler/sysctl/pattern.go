package sysctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PatternSpecifiers are the core_pattern specifiers the handler takes, in
// order: global pid, global tid of the crashing thread, signal, dump time,
// dumpable mode, RLIMIT_CORE, executable path with '/' as '!', and the
// thread's comm last, because kernels before 5.3 split the expanded pattern
// on spaces and a comm may contain them.
const PatternSpecifiers = "%P %I %s %t %d %c %E %e"

// MaxPattern is the kernel's limit on core_pattern (CORENAME_MAX_SIZE − 1).
const MaxPattern = 127

// Pattern returns the line to write into /proc/sys/kernel/core_pattern.
func Pattern(exe, configPath string) (string, error) {
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
	p += " " + PatternSpecifiers
	if len(p) > MaxPattern {
		return "", fmt.Errorf("core_pattern is %d characters, the kernel keeps %d: install the handler at a shorter path", len(p), MaxPattern)
	}
	return p, nil
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
	want := Want{Config: configPath, MaxConcurrent: maxConcurrent, Root: "/"}
	if handlerExe != "" {
		if p, err := Pattern(handlerExe, configPath); err == nil {
			want.CorePattern = p
		}
	}
	return Drift(Read(procSys), want)
}
