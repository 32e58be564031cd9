package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/unwound-dev/unwound/qemu/guest"
)

// Board is a demo board: an AArch64 guest with unwound-handler installed
// through its own --core-pattern line and unwound-uploader draining the
// queue over a serial line (the virtio console /dev/hvc0) to `unwound
// receive` on a host pty. It is what `make demo` shows and what the serial
// end-to-end test runs.
type Board struct {
	Arch     string // aarch64 by default
	Scenario string // of testdata/crash/crash.c
	CPU      string // QEMU -cpu; "max" enables AArch64 pointer authentication
	Dir      string // work directory
	Progress func(format string, args ...any)
}

// BoardResult is what a board run gives back.
type BoardResult struct {
	Reports  []string // received .json.zst files
	HostRoot string   // the board's files, unstripped, for symbolizing
	Unwound  string   // the host binary
	Console  string
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// Run builds everything, boots the board, crashes the program and drains
// the report to the host.
func (b *Board) Run(ctx context.Context) (*BoardResult, error) {
	arch := b.Arch
	if arch == "" {
		arch = "aarch64"
	}
	say := b.Progress
	if say == nil {
		say = func(string, ...any) {}
	}
	work := b.Dir
	res := &BoardResult{HostRoot: filepath.Join(work, "root"), Unwound: filepath.Join(work, "unwound")}
	say("kernel: minimal %s Linux from linux-source-6.1 (cached in ~/.cache/unwound; the first build takes a few minutes)", arch)
	kernel, err := Kernel(arch)
	if err != nil {
		return nil, err
	}
	say("building the board's binaries (static Go) and the crash program")
	for name, pkg := range map[string]string{
		"init":             "github.com/unwound-dev/unwound/qemu/cmd/guestinit",
		"unwound-handler":  "github.com/unwound-dev/unwound/cmd/unwound-handler",
		"unwound-uploader": "github.com/unwound-dev/unwound/cmd/unwound-uploader",
	} {
		if err := BuildGo(pkg, arch, filepath.Join(work, name)); err != nil {
			return nil, err
		}
	}
	if out, err := exec.Command("go", "build", "-o", res.Unwound, "github.com/unwound-dev/unwound/cmd/unwound").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build unwound: %v\n%s", err, out)
	}
	l := libsFor[arch]
	cc := l.triplet + "-gcc"
	if arch == "x86_64" {
		cc = "gcc"
	}
	os.MkdirAll(filepath.Join(res.HostRoot, "usr/bin"), 0o755)
	prog := filepath.Join(res.HostRoot, "usr/bin/crash")
	src := filepath.Join(repoRoot(), "testdata/crash/crash.c")
	flags := []string{"-O2", "-g", "-funwind-tables", "-pthread", "-Wl,--build-id", "-o", prog, src}
	if arch == "aarch64" {
		// Signed return addresses (PAC) where the CPU has them: what
		// distributions build arm64 code with.
		flags = append([]string{"-mbranch-protection=standard"}, flags...)
	}
	if out, err := exec.Command(cc, flags...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", cc, err, out)
	}
	stripped := filepath.Join(work, "crash.stripped")
	strip := l.triplet + "-strip"
	if arch == "x86_64" {
		strip = "strip"
	}
	if out, err := exec.Command(strip, "--remove-section=.comment", "--remove-section=.note", "-o", stripped, prog).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("strip: %v\n%s", err, out)
	}
	r := NewInitramfs()
	r.HostFile("/init", 0o755, filepath.Join(work, "init"))
	r.HostFile("/usr/bin/unwound-handler", 0o755, filepath.Join(work, "unwound-handler"))
	r.HostFile("/usr/bin/unwound-uploader", 0o755, filepath.Join(work, "unwound-uploader"))
	r.HostFile("/usr/bin/crash", 0o755, stripped)
	if err := AddGlibc(r, arch, res.HostRoot); err != nil {
		return nil, err
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
		{Run: []string{"/usr/bin/crash", b.Scenario}},
		{WaitFiles: "/var/lib/unwound/queue/*.json.zst", Count: 1},
		{Run: []string{"/usr/bin/unwound-uploader", "--config", "/etc/unwound/unwound.toml", "--once"}, MustSucceed: true},
		{Ship: "/var/lib/unwound/queue/*.json.zst", As: "left"},
	}}
	js, _ := json.Marshal(plan)
	r.File("/plan.json", 0o644, js)

	out := filepath.Join(work, "received")
	os.MkdirAll(out, 0o755)
	recvErr := make(chan error, 1)
	var recv *exec.Cmd
	m := &Machine{Arch: arch, Kernel: kernel, Initramfs: r, CPU: b.CPU, Timeout: 5 * time.Minute, Dir: work,
		Link: func(pty string) {
			say("host: unwound receive on %s (the board's /dev/hvc0)", pty)
			recv = exec.Command(res.Unwound, "receive", "--port", pty, "--out", out, "--idle", "3m", "--quiet")
			if err := recv.Start(); err != nil {
				recvErr <- err
				return
			}
			go func() { recvErr <- recv.Wait() }()
		}}
	say("booting the board; the handler becomes core_pattern, /usr/bin/crash %s crashes, unwound-uploader drains the queue over serial", b.Scenario)
	mres, err := m.Run(ctx)
	if mres != nil {
		res.Console = mres.Console
		if n := len(mres.Files); n > 0 {
			return res, fmt.Errorf("%d reports left in the board's queue after the upload", n)
		}
	}
	if err != nil {
		return res, err
	}
	select {
	case err := <-recvErr:
		if err != nil {
			return res, fmt.Errorf("unwound receive: %w", err)
		}
	case <-time.After(30 * time.Second):
		if recv != nil && recv.Process != nil {
			recv.Process.Kill()
		}
		return res, fmt.Errorf("unwound receive did not finish")
	}
	res.Reports, _ = filepath.Glob(filepath.Join(out, "*.json.zst"))
	if len(res.Reports) == 0 {
		return res, fmt.Errorf("no report received")
	}
	return res, nil
}
