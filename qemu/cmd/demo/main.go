// Command demo is `make demo`: it boots an AArch64 QEMU board with unwound
// installed as a Buildroot or Yocto image installs it (the packaged sysctl
// file and init script), crashes a multi-threaded program on it, drains the
// report to this host over a serial line (the unwound-uploader daemon on
// the board's /dev/hvc0, `unwound receive` on a host pty), and prints the
// backtrace symbolized with the program's debug info and the debug files
// of the board's libc (Debian's libc6-dbg). `unwound receive` also hands
// the report to a collector directory under the cache
// ($UNWOUND_CACHE/demo/collector), and the demo says how to open it in a
// browser with `unwound serve`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/qemu"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

func main() {
	keep := flag.Bool("keep", false, "keep the work directory")
	scenario := flag.String("scenario", "threads", "crash scenario of testdata/crash/crash.c")
	arch := flag.String("arch", "arm64", "board architecture: arm64 (aarch64), arm (armhf), riscv64, x86_64 (amd64)")
	cpu := flag.String("cpu", "", "QEMU CPU model (aarch64: max enables pointer authentication)")
	coll := flag.String("collector", filepath.Join(fixture.CacheDir(), "demo", "collector"), "collector `directory` the report goes into, for unwound serve --dir")
	flag.Parse()
	a, ok := arches[*arch]
	if !ok {
		fmt.Fprintf(os.Stderr, "demo: --arch %s: use arm64, arm, riscv64 or x86_64\n", *arch)
		os.Exit(2)
	}
	work, err := os.MkdirTemp("", "unwound-demo-")
	if err == nil {
		if *keep {
			fmt.Println("work directory:", work)
		}
		_, err = run(os.Stdout, a, *cpu, *scenario, work, *coll)
		if !*keep {
			os.RemoveAll(work)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// arches maps the names --arch takes (the lab's and Debian's) to the lab's.
var arches = map[string]string{
	"arm64": "aarch64", "aarch64": "aarch64", "arm": "arm", "armhf": "arm",
	"riscv64": "riscv64", "x86_64": "x86_64", "amd64": "x86_64",
}

// run is the demo; it returns the board's result for the test. The
// report goes into the collector in coll.
func run(w io.Writer, arch, cpu, scenario, work, coll string) (*qemu.BoardResult, error) {
	step := func(format string, args ...any) { fmt.Fprintf(w, "==> "+format+"\n", args...) }
	b := &qemu.Board{Arch: arch, CPU: cpu, Scenario: scenario, Dir: work, Collector: coll, Progress: step}
	res, err := b.Run(context.Background())
	if res != nil && res.Console != "" {
		step("the board's console")
		fmt.Fprint(w, indent(guestLines(res.Console)))
	}
	if err != nil {
		return res, err
	}
	how := "the unstripped program"
	if len(res.DebugDirs) > 0 {
		how += " and libc6-dbg's debug files (--debug-dir)"
	}
	step("received %s; symbolizing with %s", filepath.Base(res.Reports[0]), how)
	sym := exec.Command(res.Unwound, res.SymbolizeArgs(res.Reports[0])...)
	sym.Stdout, sym.Stderr = w, w
	if err := sym.Run(); err != nil {
		return res, err
	}
	for _, m := range res.Missing {
		step("missing: %s", m)
	}
	return res, collect(step, res, coll)
}

// collect says where unwound receive put the report in the collector in
// dir, and how to see it there.
func collect(step func(string, ...any), res *qemu.BoardResult, dir string) error {
	c, err := collector.Open(dir, collector.Options{})
	if err != nil {
		return err
	}
	defer c.Close()
	id := strings.TrimSuffix(filepath.Base(res.Reports[0]), ".json.zst")
	d, err := c.Report(id)
	if err != nil {
		return fmt.Errorf("collector %s: %w", dir, err)
	}
	g, err := c.Group(d.Group)
	if err != nil {
		return fmt.Errorf("collector %s: %w", dir, err)
	}
	step("in the collector %s: group %s, %s, %d %s", dir, g.ID, g.Signature, g.Count, plural(g.Count, "report", "reports"))
	step("to see it in a browser, from this tree: go run ./cmd/unwound serve --dir %s --listen 127.0.0.1:8080", dir)
	step("and open http://127.0.0.1:8080/group/%s", g.ID)
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// guestLines is the console without blank lines and carriage returns.
func guestLines(console string) string {
	var b strings.Builder
	for _, l := range strings.Split(console, "\n") {
		if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
