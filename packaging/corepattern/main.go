// Command corepattern prints the core_pattern line for a handler that will
// be installed at -exe with its configuration at -config: the same line
// `unwound-handler --config CONFIG --core-pattern` prints once installed,
// from the same code (handler.CorePattern), so `make install` can write it
// into sysctl.d at build time, on the build host, for any target.
//
//	go run ./packaging/corepattern -exe /usr/bin/unwound-handler -config /etc/unwound/unwound.toml [-pidfd on] [-socket @@]
//
// It exits with status 3 when no valid line exists for those paths (too
// long, or characters the kernel would split on), so make install can tell
// that apart from a helper that could not run at all.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/unwound-dev/unwound/sysctl"
)

func main() {
	exe := flag.String("exe", "", "absolute `path` the handler is installed at on the board")
	cfg := flag.String("config", "", "configuration `file` on the board")
	pidfd := flag.String("pidfd", "off", "ask the kernel for the crashed process's pidfd (%F, Linux 6.16+): `on` or off")
	socket := flag.String("socket", "off", "point core_pattern at the coredump socket server instead: `@@` (Linux 6.17+), @ (6.16) or off")
	socketPath := flag.String("socket-path", sysctl.DefaultSocket, "the coredump socket server's `path` on the board")
	flag.Parse()
	line, err := pattern(*exe, *cfg, *pidfd, *socket, *socketPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corepattern:", err)
		os.Exit(3)
	}
	fmt.Println(line)
}

// pattern is the line for these flags, or why there is none.
func pattern(exe, cfg, pidfd, socket, socketPath string) (string, error) {
	if socket != "off" {
		if socket != "@@" && socket != "@" {
			// auto and on would ask the build host's kernel.
			return "", fmt.Errorf("-socket %q: want @@, @ or off", socket)
		}
		return sysctl.ChooseSocket(socket, "", socketPath)
	}
	if pidfd != "on" && pidfd != "off" {
		// auto would ask the build host's kernel, not the board's.
		return "", fmt.Errorf("-pidfd %q: want on or off", pidfd)
	}
	return sysctl.PatternFor(exe, cfg, pidfd == "on")
}
