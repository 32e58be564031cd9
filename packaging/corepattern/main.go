// Command corepattern prints the core_pattern line for a handler that will
// be installed at -exe with its configuration at -config: the same line
// `unwound-handler --config CONFIG --core-pattern` prints once installed,
// from the same code (handler.CorePattern), so `make install` can write it
// into sysctl.d at build time, on the build host, for any target.
//
//	go run ./packaging/corepattern -exe /usr/bin/unwound-handler -config /etc/unwound/unwound.toml
//
// It exits with status 3 when no valid line exists for those paths (too
// long, or characters the kernel would split on), so make install can tell
// that apart from a helper that could not run at all.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/unwound-dev/unwound/handler/sysctl"
)

func main() {
	exe := flag.String("exe", "", "absolute `path` the handler is installed at on the board")
	cfg := flag.String("config", "", "configuration `file` on the board")
	flag.Parse()
	line, err := sysctl.Pattern(*exe, *cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corepattern:", err)
		os.Exit(3)
	}
	fmt.Println(line)
}
