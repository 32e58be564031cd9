// Command demo is `make demo`: it boots an AArch64 QEMU board with
// unwound-handler installed as core_pattern, crashes a multi-threaded
// program on it, drains the report to this host over a serial line
// (unwound-uploader on the board's /dev/hvc0, `unwound receive` on a host
// pty), and prints the symbolized backtrace.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/qemu"
	"github.com/unwound-dev/unwound/qemu/guest"
)

func main() {
	keep := flag.Bool("keep", false, "keep the work directory")
	scenario := flag.String("scenario", "threads", "crash scenario of testdata/crash/crash.c")
	flag.Parse()
	if err := run(*scenario, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func run(scenario string, keep bool) error {
	const arch = "aarch64"
	root := repoRoot()
	work, err := os.MkdirTemp("", "unwound-demo-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}

	step("kernel: minimal arm64 Linux from linux-source-6.1 (cached in ~/.cache/unwound; the first build takes a few minutes)")
	kernel, err := qemu.Kernel(arch)
	if err != nil {
		return err
	}
	step("building the board's binaries (static Go, arm64) and the crash program (aarch64-linux-gnu-gcc)")
	bins := map[string]string{
		"init":             "github.com/unwound-dev/unwound/qemu/cmd/guestinit",
		"unwound-handler":  "github.com/unwound-dev/unwound/cmd/unwound-handler",
		"unwound-uploader": "github.com/unwound-dev/unwound/cmd/unwound-uploader",
	}
	for name, pkg := range bins {
		if err := qemu.BuildGo(pkg, arch, filepath.Join(work, name)); err != nil {
			return err
		}
	}
	host := filepath.Join(work, "unwound")
	if out, err := exec.Command("go", "build", "-o", host, "github.com/unwound-dev/unwound/cmd/unwound").CombinedOutput(); err != nil {
		return fmt.Errorf("go build unwound: %v\n%s", err, out)
	}
	hostRoot := filepath.Join(work, "root") // the board's files, unstripped, as a build system keeps them
	os.MkdirAll(filepath.Join(hostRoot, "usr/bin"), 0o755)
	prog := filepath.Join(hostRoot, "usr/bin/crash")
	src := filepath.Join(root, "testdata/crash/crash.c")
	if out, err := exec.Command("aarch64-linux-gnu-gcc", "-O2", "-g", "-pthread", "-Wl,--build-id", "-o", prog, src).CombinedOutput(); err != nil {
		return fmt.Errorf("aarch64-linux-gnu-gcc: %v\n%s", err, out)
	}
	stripped := filepath.Join(work, "crash.stripped")
	if out, err := exec.Command("aarch64-linux-gnu-strip", "--remove-section=.comment", "--remove-section=.note", "-o", stripped, prog).CombinedOutput(); err != nil {
		return fmt.Errorf("strip: %v\n%s", err, out)
	}

	r := qemu.NewInitramfs()
	r.HostFile("/init", 0o755, filepath.Join(work, "init"))
	r.HostFile("/usr/bin/unwound-handler", 0o755, filepath.Join(work, "unwound-handler"))
	r.HostFile("/usr/bin/unwound-uploader", 0o755, filepath.Join(work, "unwound-uploader"))
	r.HostFile("/usr/bin/crash", 0o755, stripped)
	if err := qemu.AddGlibc(r, arch, hostRoot); err != nil {
		return err
	}
	r.File("/etc/unwound/unwound.toml", 0o644, []byte(`# The demo board: the queue lives in RAM (no flash in this VM), reports
# leave over the virtio console.
[queue]
dir = "/var/lib/unwound/queue"
allow_volatile = true
[upload]
transport = "serial"
[serial]
port = "/dev/hvc0"
baud = 115200
`))
	plan := guest.Plan{Steps: []guest.Step{
		{Mkdir: "/var/lib/unwound/queue"},
		{CorePattern: []string{"/usr/bin/unwound-handler", "--config", "/etc/unwound/unwound.toml", "--core-pattern"}},
		{Run: []string{"/usr/bin/crash", scenario}},
		{WaitFiles: "/var/lib/unwound/queue/*.json.zst", Count: 1},
		{Run: []string{"/usr/bin/unwound-uploader", "--config", "/etc/unwound/unwound.toml", "--once"}, MustSucceed: true},
	}}
	js, _ := json.Marshal(plan)
	r.File("/plan.json", 0o644, js)

	out := filepath.Join(work, "received")
	os.MkdirAll(out, 0o755)
	var recv *exec.Cmd
	recvErr := make(chan error, 1)
	m := &qemu.Machine{Arch: arch, Kernel: kernel, Initramfs: r, Timeout: 5 * time.Minute, Dir: work,
		Link: func(pty string) {
			step("host: unwound receive on %s (the board's /dev/hvc0)", pty)
			recv = exec.Command(host, "receive", "--port", pty, "--out", out, "--count", "1", "--idle", "3m")
			recv.Stdout, recv.Stderr = os.Stdout, os.Stderr
			if err := recv.Start(); err != nil {
				recvErr <- err
				return
			}
			go func() { recvErr <- recv.Wait() }()
		}}
	step("booting the board: qemu-system-aarch64 -M virt -cpu cortex-a53; the handler becomes core_pattern, /usr/bin/crash %s crashes, unwound-uploader drains the queue over serial", scenario)
	res, err := m.Run(context.Background())
	if res != nil {
		fmt.Print(indent(guestLines(res.Console)))
	}
	if err != nil {
		return err
	}
	select {
	case err := <-recvErr:
		if err != nil {
			return fmt.Errorf("unwound receive: %w", err)
		}
	case <-time.After(30 * time.Second):
		if recv != nil && recv.Process != nil {
			recv.Process.Kill()
		}
		return fmt.Errorf("unwound receive did not finish")
	}
	reports, _ := filepath.Glob(filepath.Join(out, "*.json.zst"))
	if len(reports) == 0 {
		return fmt.Errorf("no report received")
	}
	step("received %s; symbolizing with the unstripped program", filepath.Base(reports[0]))
	sym := exec.Command(host, "symbolize", "--sysroot", hostRoot, reports[0])
	sym.Stdout, sym.Stderr = os.Stdout, os.Stderr
	if err := sym.Run(); err != nil {
		// Without the symbolizer, the raw trace.
		dec := exec.Command(host, "decode", "--format", "text", reports[0])
		dec.Stdout, dec.Stderr = os.Stdout, os.Stderr
		return dec.Run()
	}
	return nil
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
