package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Board is a demo board: a BusyBox system with unwound installed the way a
// Buildroot or Yocto (sysvinit) image has it (PackagedRoot: `make install
// INIT=sysvinit`, S02sysctl applying the installed sysctl file, the
// installed init script starting the uploader), Debian's own glibc
// (Debian 12's; Debian 13's for riscv64, which Debian 12 lacks), and a
// last init script that crashes a multi-threaded program. The uploader
// daemon drains the report over a serial line (the virtio console
// /dev/hvc0) to `unwound receive` on a host pty. It is what `make demo`
// shows and what the serial end-to-end tests run.
type Board struct {
	Arch     string // aarch64 by default
	Scenario string // of testdata/crash/crash.c
	CPU      string // QEMU -cpu; "max" enables AArch64 pointer authentication
	Dir      string // work directory
	// Collector, when set, is a collector directory `unwound receive`
	// also hands the report to (--dir), symbolized at ingest with the
	// board's files.
	Collector string
	Progress  func(format string, args ...any)
}

// BoardResult is what a board run gives back.
type BoardResult struct {
	Reports  []string // received .json.zst files
	HostRoot string   // the board's files, unstripped, for symbolizing
	// Program is /usr/bin/crash as the board has it: stripped, with
	// MiniDebugInfo.
	Program string
	// DebugDirs are the build-id trees for `unwound symbolize --debug-dir`:
	// libc6-dbg's for Debian's libc on the board.
	DebugDirs []string
	// Missing says what the demo could not have (Debian's libc without
	// network, say), and what the trace lacks because of it.
	Missing []string
	Unwound string // the host binary
	Console string
}

// SymbolizeArgs are the arguments of `unwound symbolize` for a received
// report: the board's unstripped files and the debug directories.
func (r *BoardResult) SymbolizeArgs(report string, extra ...string) []string {
	a := append([]string{"symbolize"}, extra...)
	a = append(a, "--sysroot", r.HostRoot)
	for _, d := range r.DebugDirs {
		a = append(a, "--debug-dir", d)
	}
	return append(a, report)
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// boardConfig is what the demo changes in the installed configuration,
// as an integrator's rootfs overlay would.
var boardConfig = []struct{ sec, key, val string }{
	// The board's root is an initramfs: no flash in this VM.
	{"queue", "allow_volatile", "true"},
	// Reports leave over the virtio console.
	{"upload", "transport", `"serial"`},
	{"serial", "port", `"/dev/hvc0"`},
}

// boardScript is the board's last init script (/etc/init.d/S99demo): it
// shows the kernel's crash settings as the installed files left them,
// crashes the program, waits for the uploader daemon to drain the queue,
// then shows what unwound logged (the uploader's check of the kernel's
// settings, the handler's lines in the kernel log) and reboots, which ends
// QEMU (-no-reboot).
const boardScript = `#!/bin/sh
# The demo's crash (written by qemu/board.go; not part of a package).
[ "$1" = start ] || exit 0
CONFIG=/etc/unwound/unwound.toml
Q=$(sed -n 's/^dir = "\(.*\)"$/\1/p' "$CONFIG" | head -n 1)
rc=0
say() { echo "demo: $*"; }
say "kernel.core_pattern = $(cat /proc/sys/kernel/core_pattern)"
say "kernel.core_pipe_limit = $(cat /proc/sys/kernel/core_pipe_limit), fs.suid_dumpable = $(cat /proc/sys/fs/suid_dumpable)"
pidof unwound-uploader >/dev/null && say "unwound-uploader running (pid $(pidof unwound-uploader))" || { say "unwound-uploader not running"; rc=1; }
/usr/bin/crash "$SCENARIO" &
wait $!
say "/usr/bin/crash $SCENARIO: exit status $?"
# Drained: no handler still at work and no report left (the uploader
# removes a report once the host has acknowledged it).
i=0
while [ $i -lt 1200 ]; do
	set -- "$Q"/*.json.zst
	[ -e "$1" ] || pidof unwound-handler >/dev/null || break
	sleep 0.1
	i=$((i + 1))
done
if [ -e "$1" ]; then
	say "queue not drained: $*"
	rc=1
else
	say "queue drained"
fi
# A report the host refused, or one the uploader found corrupt, leaves
# the queue too, into its quarantine: not delivered.
set -- "$Q"/quarantine/*
if [ -e "$1" ]; then
	say "quarantined, not delivered: $*"
	rc=1
fi
say "the handler's kernel log:"
dmesg | grep unwound-handler
say "unwound-uploader list (at start it checks the kernel's crash settings; a mismatch would be printed first):"
unwound-uploader --config "$CONFIG" list
sync
echo "UNWOUND-GUEST-DONE rc=$rc"
reboot -f
`

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
	// The first kernel build takes minutes: the board's files, downloads
	// and builds are made meanwhile.
	type built struct {
		image string
		err   error
	}
	kch := make(chan built, 1)
	go func() {
		image, err := Kernel(arch)
		kch <- built{image, err}
	}()
	suite := "Debian 12's"
	if arch == "riscv64" {
		suite = "Debian 13's (Debian 12 has no riscv64)"
	}
	say("the board's libc: %s libc6, with libc6-dbg's debug files for the host (qemu/libc/get.sh)", suite)
	type fetched struct {
		libc *DebianLibc
		err  error
	}
	dch := make(chan fetched, 1)
	go func() {
		dl, err := FetchDebianLibc(arch)
		dch <- fetched{dl, err}
	}()
	say("board files: make install INIT=sysvinit (unwound-handler, unwound-uploader, unwound.toml, /etc/sysctl.d/60-unwound.conf, /etc/init.d/unwound), BusyBox init")
	rootDir := filepath.Join(work, "rootfs")
	if err := PackagedRoot(arch, rootDir); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(rootDir, "etc/unwound/unwound.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	for _, c := range boardConfig {
		if cfg, err = SetTOML(cfg, c.sec, c.key, c.val); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	script := strings.Replace(boardScript, "CONFIG=", "SCENARIO="+b.Scenario+"\nCONFIG=", 1)
	if err := os.WriteFile(filepath.Join(rootDir, "etc/init.d/S99demo"), []byte(script), 0o755); err != nil {
		return nil, err
	}
	if _, err := HostUnwound(work); err != nil {
		return nil, err
	}

	d := <-dch
	dl := d.libc
	if d.err != nil {
		res.Missing = append(res.Missing, "Debian's libc6 and libc6-dbg could not be had: "+d.err.Error()+"; the board runs the cross toolchain's libc instead, whose frames are named only where its .dynsym covers them, without file:line")
		say("missing: %s", res.Missing[len(res.Missing)-1])
	}

	l := libsFor[arch]
	cc := l.triplet + "-gcc"
	if arch == "x86_64" {
		cc = "gcc"
	}
	say("building /usr/bin/crash (%s -O2 -g; on the board stripped as Yocto and Buildroot strip it, then given MiniDebugInfo as the Buildroot option BR2_PACKAGE_UNWOUND_MINIDEBUGINFO does)", cc)
	os.MkdirAll(filepath.Join(res.HostRoot, "usr/bin"), 0o755)
	prog := filepath.Join(res.HostRoot, "usr/bin/crash")
	src := filepath.Join(repoRoot(), "testdata/crash/crash.c")
	// Linked against the cross toolchain's glibc (libc6-<arch>-cross),
	// run with Debian's libc6 of the same release: glibc is backward
	// compatible, and the program needs no symbol newer than 2.36
	// (docs/qemu-lab.md, "The demo").
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
	res.Program = stripped
	binutils := l.triplet + "-"
	if arch == "x86_64" {
		binutils = ""
	}
	if out, err := exec.Command(binutils+"strip", "--remove-section=.comment", "--remove-section=.note", "-o", stripped, prog).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("strip: %v\n%s", err, out)
	}
	// What buildroot/package/unwound/minidebuginfo.sh does after
	// Buildroot's strip: .gnu_debugdata from the unstripped file (the
	// FUNC symbols .dynsym lacks, and .debug_frame for code no loaded
	// table covers), which the handler reads on the board.
	mdi := exec.Command(res.Unwound, "minidebuginfo", "--objcopy", binutils+"objcopy", "--unstripped", prog, "--stripped", stripped, "-v")
	added, err := mdi.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("unwound minidebuginfo: %v\n%s", err, added)
	}
	say("MiniDebugInfo (unwound minidebuginfo): %s", strings.TrimSpace(strings.TrimPrefix(string(added), stripped+": ")))
	r := NewInitramfs()
	if err := r.HostTree(rootDir, "/"); err != nil {
		return nil, err
	}
	r.HostFile("/usr/bin/crash", 0o755, stripped)
	if dl != nil {
		res.DebugDirs = append(res.DebugDirs, dl.Debug)
		err = AddDebianGlibc(r, arch, dl, res.HostRoot)
	} else {
		err = AddGlibc(r, arch, res.HostRoot)
	}
	if err != nil {
		return nil, err
	}

	k := <-kch
	if k.err != nil {
		return nil, k.err
	}
	kernel := k.image
	out := filepath.Join(work, "received")
	os.MkdirAll(out, 0o755)
	recvErr := make(chan error, 1)
	var recv *exec.Cmd
	// The receiver's log, for when it fails: the demo prints only the
	// trace.
	recvLog, err := os.Create(filepath.Join(work, "receive.log"))
	if err != nil {
		return nil, err
	}
	defer recvLog.Close()
	m := &Machine{Arch: arch, Kernel: kernel, Initramfs: r, CPU: b.CPU, Timeout: 5 * time.Minute, Dir: work,
		Link: func(pty string) {
			args := []string{"receive", "--port", pty, "--out", out, "--count", "1", "--idle", "3m"}
			if b.Collector != "" {
				args = append(args, "--dir", b.Collector, "--sysroot", res.HostRoot)
				for _, d := range res.DebugDirs {
					args = append(args, "--debug-dir", d)
				}
				say("host: unwound receive on %s (the board's /dev/hvc0), into the collector %s", pty, b.Collector)
			} else {
				say("host: unwound receive on %s (the board's /dev/hvc0)", pty)
			}
			recv = exec.Command(res.Unwound, args...)
			recv.Stderr = recvLog
			if err := recv.Start(); err != nil {
				recvErr <- err
				return
			}
			go func() { recvErr <- recv.Wait() }()
		}}
	say("booting the board: BusyBox init runs S02sysctl and S50unwound, then /usr/bin/crash %s crashes and the uploader daemon drains the queue over serial", b.Scenario)
	mres, err := m.Run(ctx)
	if mres != nil {
		res.Console = mres.Console
	}
	var recvDone error
	if recv == nil {
		recvDone = errors.New("not started: QEMU gave no pty")
	} else {
		recvDone = waitReceive(recv, recvErr)
	}
	if err != nil {
		return res, err
	}
	if recvDone != nil {
		log, _ := os.ReadFile(recvLog.Name())
		return res, fmt.Errorf("unwound receive: %w; its log:\n%s", recvDone, log)
	}
	res.Reports, _ = filepath.Glob(filepath.Join(out, "*.json.zst"))
	if len(res.Reports) == 0 {
		return res, fmt.Errorf("no report received")
	}
	return res, nil
}

// waitReceive waits for `unwound receive` (whose exit recvErr delivers)
// after the board powered off: it has the report, or is about to say it
// never will (its pty's other end closed). After 30 s it is made to print
// its goroutines' stacks into its log, and killed: never left behind.
func waitReceive(recv *exec.Cmd, recvErr <-chan error) error {
	select {
	case err := <-recvErr:
		return err
	case <-time.After(30 * time.Second):
	}
	if recv.Process != nil {
		recv.Process.Signal(syscall.SIGQUIT)
		select {
		case <-recvErr:
		case <-time.After(5 * time.Second):
			recv.Process.Kill()
			<-recvErr
		}
	}
	return errors.New("did not finish")
}
