// Command demo is `make demo`: it boots an AArch64 QEMU board with
// unwound-handler installed as core_pattern, crashes a multi-threaded
// program on it, drains the report to this host over a serial line
// (unwound-uploader on the board's /dev/hvc0, `unwound receive` on a host
// pty), and prints the symbolized backtrace.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/unwound-dev/unwound/qemu"
	"github.com/unwound-dev/unwound/qemu/guest"
)

func main() {
	keep := flag.Bool("keep", false, "keep the work directory")
	scenario := flag.String("scenario", "threads", "crash scenario of testdata/crash/crash.c")
	arch := flag.String("arch", "aarch64", "board architecture: aarch64, arm, riscv64, x86_64")
	cpu := flag.String("cpu", "", "QEMU CPU model (aarch64: max enables pointer authentication)")
	flag.Parse()
	if err := run(*arch, *cpu, *scenario, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func run(arch, cpu, scenario string, keep bool) error {
	work, err := os.MkdirTemp("", "unwound-demo-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}
	b := &qemu.Board{Arch: arch, CPU: cpu, Scenario: scenario, Dir: work, Progress: step}
	res, err := b.Run(context.Background())
	if res != nil {
		fmt.Print(indent(guestLines(res.Console)))
	}
	if err != nil {
		return err
	}
	step("received %s; symbolizing with the unstripped program", filepath.Base(res.Reports[0]))
	sym := exec.Command(res.Unwound, "symbolize", "--sysroot", res.HostRoot, res.Reports[0])
	sym.Stdout, sym.Stderr = os.Stdout, os.Stderr
	return sym.Run()
}

// guestLines keeps the console lines worth showing.
func guestLines(console string) string {
	var b strings.Builder
	for _, l := range strings.Split(console, "\n") {
		if strings.HasPrefix(l, "guestinit:") || strings.HasPrefix(l, "unwound") || strings.Contains(l, guest.Marker) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
