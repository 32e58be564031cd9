package qemu

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The packaged-image tests (docs/qemu-lab.md, "Image tests"): a guest whose
// unwound files come from `make install DESTDIR=… INIT=sysvinit` for the
// board's GOOS/GOARCH, booted with BusyBox init, which runs the installed
// sysctl file and init script like a Buildroot image does. The uploader
// daemon the init script starts drains every report over the board's serial
// line to `unwound receive` on a host pty.

// ImageScenario is one crash the image driver runs: a program under
// /usr/bin and its argument.
type ImageScenario struct {
	Prog, Arg string
}

// Name is the scenario's name in test output.
func (s ImageScenario) Name() string { return s.Arg }

// ImageScenarios is what the image tests crash on every architecture: a
// multi-threaded crash, a crash inside a signal handler, abort(), a deep
// recursion overflowing the stack, and an uncaught C++ exception.
var ImageScenarios = []ImageScenario{
	{"crash", "threads"}, {"crash", "sighandler"}, {"crash", "abort"},
	{"crash", "recursion"}, {"crashxx", "throw"},
}

// Busybox returns the path of a static BusyBox for arch (qemu/busybox/get.sh:
// Debian's busybox-static, or Debian's source cross-built for riscv64).
func Busybox(arch string) (string, error) {
	script := filepath.Join(repoRoot(), "qemu", "busybox", "get.sh")
	return runScript(exec.Command(script, arch), "busybox "+arch)
}

// MakeInstall runs the project's `make install DESTDIR=dest INIT=sysvinit`
// for the board arch (GOOS/GOARCH/GOARM) in a private copy of the source
// tree, so concurrent installs (packaging tests) never share build/.
func MakeInstall(arch, dest string, vars ...string) ([]byte, error) {
	src, err := os.MkdirTemp("", "unwound-src-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(src)
	if err := copySource(repoRoot(), src); err != nil {
		return nil, err
	}
	goarch, goarm := GoArch(arch)
	args := append([]string{"--no-print-directory", "install", "DESTDIR=" + dest, "INIT=sysvinit"}, vars...)
	cmd := exec.Command("make", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "GOARM="+goarm)
	return cmd.CombinedOutput()
}

// copySource copies the source tree (regular files and directories; not
// .git, build/ or dist/).
func copySource(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			if rel == ".git" || rel == "build" || rel == "dist" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		st, _ := d.Info()
		return os.WriteFile(filepath.Join(to, rel), b, st.Mode().Perm())
	})
}

// SetTOML sets key = value (value in TOML syntax) in [section] of a
// configuration file, keeping every other line and comment: what an
// integrator's rootfs overlay or post-build script does to the installed
// file. A key that is not in the file is an error (the test must change
// what ships, not add to it).
func SetTOML(data []byte, section, key, value string) ([]byte, error) {
	var out bytes.Buffer
	cur, done := "", false
	keyRE := regexp.MustCompile(`^` + regexp.QuoteMeta(key) + `\s*=`)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := sc.Text()
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
			cur = strings.Trim(t, "[] ")
		}
		if cur == section && !done && keyRE.MatchString(t) {
			l, done = key+" = "+value, true
		}
		out.WriteString(l + "\n")
	}
	if !done {
		return nil, fmt.Errorf("config: no %s key in [%s]", key, section)
	}
	return out.Bytes(), nil
}

// imageConfig is what the image tests change in the installed
// configuration, and why.
func imageConfig(installed []byte, port string) ([]byte, error) {
	sets := []struct{ sec, key, val string }{
		// The lab saves every full core (debug option) and ships it out
		// for gdb.
		{"handler", "save_core_dir", `"/var/lib/unwound/cores"`},
		// TCG runs guests 10-50x slower than a board: the 87,000-frame
		// recursion is walked live to its end, as on hardware.
		{"handler", "deadline", `"120s"`},
		{"handler", "freeze_budget", `"60s"`},
		// The guest's root is an initramfs: no flash in this VM.
		{"queue", "allow_volatile", "true"},
		// Every scenario crashes once per boot, faster than 5 an hour.
		{"rate_limit", "count", "0"},
		{"upload", "transport", `"serial"`},
	}
	if port != "" {
		sets = append(sets, struct{ sec, key, val string }{"serial", "port", strconv.Quote(port)})
	}
	var err error
	for _, s := range sets {
		if installed, err = SetTOML(installed, s.sec, s.key, s.val); err != nil {
			return nil, err
		}
	}
	return installed, nil
}

// bootFiles are the BusyBox init files of the image: written here, in the
// shape of a Buildroot skeleton (inittab → rcS → /etc/init.d/S??* start).
var bootFiles = map[string]string{
	"/etc/inittab": `# BusyBox init: kernel filesystems, then every /etc/init.d/S??* script.
::sysinit:/bin/mount -t proc proc /proc
::sysinit:/bin/mount -t sysfs sysfs /sys
::sysinit:/bin/mount -t devtmpfs devtmpfs /dev
::sysinit:/bin/mount -t tmpfs -o mode=0755 tmpfs /run
::sysinit:/bin/mount -t tmpfs tmpfs /tmp
::sysinit:/etc/init.d/rcS
`,
	"/etc/init.d/rcS": `#!/bin/sh
# Start every /etc/init.d/S??* script in order, as BusyBox images do.
for s in /etc/init.d/S??*; do
	[ -x "$s" ] || continue
	"$s" start
done
`,
	"/etc/init.d/S02sysctl": `#!/bin/sh
# Apply /etc/sysctl.d/*.conf and /etc/sysctl.conf with BusyBox sysctl, as
# Buildroot's S02sysctl does for BusyBox-init images.
case "$1" in
start)
	printf 'Running sysctl: '
	rc=0
	for f in /etc/sysctl.d/*.conf /etc/sysctl.conf; do
		[ -f "$f" ] || continue
		sysctl -q -p "$f" || rc=1
	done
	[ $rc = 0 ] && echo OK || echo FAIL
	;;
esac
`,
}

// Applets the image's scripts use, linked to /bin/busybox.
var applets = []string{"sh", "ash", "mount", "mkdir", "cat", "echo", "printf", "sysctl", "ls", "sleep",
	"sha256sum", "stat", "wc", "reboot", "poweroff", "start-stop-daemon", "kill", "pidof", "cut",
	"ln", "rm", "true", "false", "test", "[", "grep", "head", "cp", "sync", "dmesg", "ps", "tr", "basename", "uname", "cmp", "sed"}

// driverScript is /etc/init.d/S99unwound-image: it runs last, crashes every
// scenario, waits for the uploader to empty the queue, ships the saved
// cores (and any report left behind) to the host, prints the end marker
// and reboots (QEMU runs with -no-reboot).
func driverScript(scen []ImageScenario) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
# unwound image test driver (written by qemu/image.go; not part of a package).
[ "$1" = start ] || exit 0
CONFIG=/etc/unwound/unwound.toml
[ -r /etc/default/unwound ] && . /etc/default/unwound
Q=$(sed -n 's/^dir = "\(.*\)"$/\1/p' "$CONFIG" | head -n 1)
C=/var/lib/unwound/cores
rc=0
say() { echo "unwound-image: $*"; }
say "core_pattern $(cat /proc/sys/kernel/core_pattern)"
say "core_pipe_limit $(cat /proc/sys/kernel/core_pipe_limit) suid_dumpable $(cat /proc/sys/fs/suid_dumpable)"
pidof unwound-uploader >/dev/null && say "uploader running" || { say "uploader not running"; rc=1; }
n=0
crash() {
	name=$3
	n=$((n + 1))
	"/usr/bin/$1" "$2" &
	pid=$!
	wait $pid
	st=$?
	# The handler may still write the report after the process is reaped.
	i=0
	while [ $i -lt 1200 ]; do
		set -- $C/core.*
		[ -e "$1" ] && [ $# -ge $n ] && ! pidof unwound-handler >/dev/null && break
		sleep 0.1
		i=$((i + 1))
	done
	say "scenario $name pid $pid status $st cores $#"
}
`)
	for _, s := range scen {
		fmt.Fprintf(&b, "crash %s %s %s\n", s.Prog, s.Arg, s.Name())
	}
	b.WriteString(`i=0
while [ $i -lt 3000 ]; do
	set -- "$Q"/*.json.zst
	[ -e "$1" ] || break
	sleep 0.1
	i=$((i + 1))
done
[ -e "$1" ] && { say "queue not drained: $*"; rc=1; } || say "queue drained"
port=
for p in /sys/class/virtio-ports/*; do
	[ "$(cat "$p/name" 2>/dev/null)" = unwound.ship ] && port=/dev/${p##*/}
done
ship() {
	for f in "$2"/*; do
		[ -f "$f" ] || continue
		sz=$(stat -c %s "$f")
		sum=$(sha256sum "$f" | cut -d ' ' -f 1)
		{ printf 'UNWOUND-FILE %s/%s %s %s\n' "$1" "${f##*/}" "$sz" "$sum"; cat "$f"; printf '\n'; } >"$port" || rc=1
	done
}
if [ -n "$port" ]; then
	ship cores "$C"
	ship left "$Q"
else
	say "no ship port"
	rc=1
fi
sync
echo "UNWOUND-GUEST-DONE rc=$rc"
reboot -f
`)
	return b.String()
}

// ImageRoot assembles the guest's file tree in dir: PackagedRoot, then
// the configuration changes of imageConfig and the test driver. The crash
// programs and libraries are added by the caller (they depend on the
// userland's architecture).
func ImageRoot(arch, dir, port string, scen []ImageScenario) error {
	if err := PackagedRoot(arch, dir); err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "etc/unwound/unwound.toml")
	installed, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	cfg, err := imageConfig(installed, port)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "var/lib/unwound/cores"), 0o700); err != nil {
		return err
	}
	// Between S02sysctl and S50unwound: what the installed sysctl file
	// alone set (the host compares it with the file's line).
	probe := "#!/bin/sh\necho \"unwound-image: after sysctl.d: $(cat /proc/sys/kernel/core_pattern)\"\n"
	if err := os.WriteFile(filepath.Join(dir, "etc/init.d/S03unwound-image-probe"), []byte(probe), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "etc/init.d/S99unwound-image"), []byte(driverScript(scen)), 0o755)
}

// PackagedRoot is a minimal BusyBox system with unwound installed the way
// a Buildroot image has it: `make install INIT=sysvinit` for arch, BusyBox
// init, S02sysctl, and the installed init script as S50unwound.
func PackagedRoot(arch, dir string) error {
	if out, err := MakeInstall(arch, dir); err != nil {
		return fmt.Errorf("make install: %v\n%s", err, out)
	}
	bb, err := Busybox(arch)
	if err != nil {
		return err
	}
	for _, d := range []string{"bin", "sbin", "proc", "sys", "dev", "run", "tmp", "var/lib/unwound", "etc/init.d", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), b, 0o755); err != nil {
		return err
	}
	for _, a := range applets {
		os.Symlink("busybox", filepath.Join(dir, "bin", a))
	}
	os.Symlink("../bin/busybox", filepath.Join(dir, "sbin/init"))
	os.Symlink("bin/busybox", filepath.Join(dir, "init"))
	os.Symlink("../run", filepath.Join(dir, "var/run"))
	for p, text := range bootFiles {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(text), 0o755); err != nil {
			return err
		}
	}
	// The installed init script starts at S50, after sysctl.
	return os.Symlink("unwound", filepath.Join(dir, "etc/init.d/S50unwound"))
}

// HostTree adds a host directory tree to the archive under prefix, with
// the files' permission bits (the queue directory stays 0700) and
// symbolic links as links.
func (r *Initramfs) HostTree(dir, prefix string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			continue
		}
		g := clean(prefix + "/" + filepath.ToSlash(rel))
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		perm := uint32(st.Mode().Perm())
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			r.Symlink(g, t)
		case st.IsDir():
			r.Dir(g)
			r.entries[g] = entry{mode: modeDir | perm}
		case st.Mode().IsRegular():
			r.HostFile(g, perm, p)
		}
	}
	return nil
}

// ImageRun is one boot of an image: the machine, the host's receiver, and
// what came back.
type ImageRun struct {
	Machine  *Machine
	Unwound  string // the host's unwound binary
	Received string // directory for received reports
	Count    int    // reports expected
	Log      func(format string, args ...any)
}

// ImageResult is what an image run gives back.
type ImageResult struct {
	*Result
	Reports    []string // received .json.zst files
	ReceiveLog string
	// PIDs maps each scenario's name to the pid the driver saw crash.
	PIDs map[string]int
}

var scenarioRE = regexp.MustCompile(`unwound-image: scenario (\S+) pid (\d+) status`)

// Run boots the image with `unwound receive` on the link's host pty.
func (ir *ImageRun) Run(ctx context.Context) (*ImageResult, error) {
	if err := os.MkdirAll(ir.Received, 0o755); err != nil {
		return nil, err
	}
	logf := ir.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var recvOut bytes.Buffer
	recvErr := make(chan error, 1)
	var recv *exec.Cmd
	ir.Machine.Link = func(pty string) {
		logf("host: unwound receive on %s", pty)
		recv = exec.Command(ir.Unwound, "receive", "--port", pty, "--out", ir.Received,
			"--count", strconv.Itoa(ir.Count), "--follow", "--idle", "10m")
		recv.Stdout, recv.Stderr = &recvOut, &recvOut
		if err := recv.Start(); err != nil {
			recvErr <- err
			return
		}
		go func() { recvErr <- recv.Wait() }()
	}
	mres, err := ir.Machine.Run(ctx)
	res := &ImageResult{Result: mres, PIDs: map[string]int{}}
	if mres != nil {
		for _, m := range scenarioRE.FindAllStringSubmatch(mres.Console, -1) {
			res.PIDs[m[1]], _ = strconv.Atoi(m[2])
		}
	}
	// The guest drained its queue before it rebooted: the receiver has
	// every report already, or never will.
	select {
	case rerr := <-recvErr:
		if rerr != nil && err == nil {
			err = fmt.Errorf("unwound receive: %v", rerr)
		}
	case <-time.After(10 * time.Second):
		if recv != nil && recv.Process != nil {
			recv.Process.Kill()
			<-recvErr
		}
	}
	res.ReceiveLog = recvOut.String()
	res.Reports, _ = filepath.Glob(filepath.Join(ir.Received, "*.json.zst"))
	return res, err
}

// AddMiniDebugInfo writes to out the stripped program plus our
// MiniDebugInfo made from the unstripped one, as the Yocto class and the
// Buildroot option do: the host's `unwound minidebuginfo` with the
// target's objcopy (docs/minidebuginfo.md).
func AddMiniDebugInfo(unwound, arch, unstripped, stripped, out string) error {
	objcopy := map[string]string{"arm": "arm-linux-gnueabihf-", "aarch64": "aarch64-linux-gnu-", "riscv64": "riscv64-linux-gnu-"}[arch] + "objcopy"
	cmd := exec.Command(unwound, "minidebuginfo", "--objcopy", objcopy, "--unstripped", unstripped, "--stripped", stripped, "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("unwound minidebuginfo %s: %v\n%s", stripped, err, b)
	}
	return nil
}

// HostUnwound builds the host's unwound command into dir.
func HostUnwound(dir string) (string, error) {
	return hostBuild("github.com/unwound-dev/unwound/cmd/unwound", filepath.Join(dir, "unwound"))
}

// hostBuild builds a command of this tree for the host, at out.
func hostBuild(pkg, out string) (string, error) {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", path.Base(pkg), err, b)
	}
	return out, nil
}
