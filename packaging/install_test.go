package packaging

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// repoRoot is the top of the source tree (this package sits one below).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// shortTemp is a temporary DESTDIR with a short name: the handler run from
// DESTDIR prints a core_pattern that must still fit the kernel's 127.
func shortTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "uw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func haveUploader(t *testing.T) bool {
	_, err := os.Stat(filepath.Join(repoRoot(t), "cmd", "unwound-uploader"))
	return err == nil
}

// makeIn runs make in dir and returns its combined output.
func makeIn(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tree lists every path under root as "mode path", directories included.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var got []string
	testutil.Walk(t, root, func(rel, _ string, mode fs.FileMode) {
		got = append(got, mode.String()+" /"+rel)
	})
	sort.Strings(got)
	return got
}

// installTree is what `make install PREFIX=/usr SYSCONFDIR=/etc` must leave
// for each INIT flavour, and nothing else.
func installTree(init string, uploader bool) []string {
	dir := "drwxr-xr-x "
	want := []string{
		dir + "/etc", dir + "/etc/unwound", "-rw-r--r-- /etc/unwound/unwound.toml",
		dir + "/usr", dir + "/usr/bin", "-rwxr-xr-x /usr/bin/unwound-handler",
		dir + "/var", dir + "/var/lib", dir + "/var/lib/unwound", "drwx------ /var/lib/unwound/queue",
	}
	if uploader {
		want = append(want, "-rwxr-xr-x /usr/bin/unwound-uploader")
	}
	switch init {
	case "systemd":
		want = append(want, dir+"/usr/lib", dir+"/usr/lib/sysctl.d", "-rw-r--r-- /usr/lib/sysctl.d/60-unwound.conf",
			dir+"/usr/lib/systemd", dir+"/usr/lib/systemd/system",
			"-rw-r--r-- /usr/lib/systemd/system/unwound-coredump.socket",
			"-rw-r--r-- /usr/lib/systemd/system/unwound-coredump.service")
		if uploader {
			want = append(want, "-rw-r--r-- /usr/lib/systemd/system/unwound-uploader.service",
				"-rw-r--r-- /usr/lib/systemd/system/unwound-upload-once.service",
				"-rw-r--r-- /usr/lib/systemd/system/unwound-upload-once.timer")
		}
	case "sysvinit":
		want = append(want, dir+"/etc/init.d", "-rwxr-xr-x /etc/init.d/unwound",
			dir+"/etc/sysctl.d", "-rw-r--r-- /etc/sysctl.d/60-unwound.conf")
	}
	sort.Strings(want)
	return want
}

// sysctlConf reads key = value lines as systemd-sysctl and BusyBox sysctl -p do.
func sysctlConf(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line without '=': %q", path, line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return kv
}

// handlerPattern runs the installed handler as the board would and strips
// the DESTDIR it runs from.
func handlerPattern(t *testing.T, destdir, prefix, sysconfdir, pidfd string) string {
	t.Helper()
	exe := filepath.Join(destdir, prefix, "bin", "unwound-handler")
	out, err := exec.Command(exe, "--config", sysconfdir+"/unwound/unwound.toml", "--pidfd", pidfd, "--core-pattern").Output()
	if err != nil {
		t.Fatalf("%s --core-pattern: %v", exe, err)
	}
	line := strings.TrimSuffix(string(out), "\n")
	resolved, err := filepath.EvalSymlinks(destdir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(line, "|"+resolved) {
		t.Fatalf("handler printed %q, not under %s", line, resolved)
	}
	return "|" + strings.TrimPrefix(line, "|"+resolved)
}

func TestInstall(t *testing.T) {
	root := repoRoot(t)
	uploader := haveUploader(t)
	for _, init := range []string{"systemd", "sysvinit", "none"} {
		t.Run(init, func(t *testing.T) {
			dest := shortTemp(t)
			// sysvinit's image asks for the pidfd (%F), systemd's not.
			pidfd := "off"
			if init == "sysvinit" {
				pidfd = "on"
			}
			out, err := makeIn(t, root, nil, "install", "DESTDIR="+dest, "PREFIX=/usr", "SYSCONFDIR=/etc",
				"QUEUE_DIR=/var/lib/unwound/queue", "INIT="+init, "CORE_PATTERN_PIDFD="+pidfd)
			if err != nil {
				t.Fatalf("make install INIT=%s: %v\n%s", init, err, out)
			}
			got, want := tree(t, dest), installTree(init, uploader)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("installed tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			cfg, err := config.Load(filepath.Join(dest, "etc/unwound/unwound.toml"))
			if err != nil {
				t.Errorf("installed configuration: %v", err)
			} else if cfg.Queue.Dir != "/var/lib/unwound/queue" {
				t.Errorf("queue.dir = %q", cfg.Queue.Dir)
			}
			if init == "none" {
				return
			}
			conf := filepath.Join(dest, "usr/lib/sysctl.d/60-unwound.conf")
			if init == "sysvinit" {
				conf = filepath.Join(dest, "etc/sysctl.d/60-unwound.conf")
			}
			kv := sysctlConf(t, conf)
			pattern := handlerPattern(t, dest, "/usr", "/etc", pidfd)
			if strings.Contains(pattern, "%F") != (pidfd == "on") {
				t.Errorf("CORE_PATTERN_PIDFD=%s: core_pattern %q", pidfd, pattern)
			}
			if kv["kernel.core_pattern"] != pattern {
				t.Errorf("60-unwound.conf core_pattern\n %q\nthe installed handler prints\n %q", kv["kernel.core_pattern"], pattern)
			}
			if len(pattern) > 127 {
				t.Errorf("core_pattern is %d characters", len(pattern))
			}
			if kv["fs.suid_dumpable"] != "2" || kv["kernel.core_pipe_limit"] != "4" || len(kv) != 3 {
				t.Errorf("60-unwound.conf: %v", kv)
			}
			switch init {
			case "sysvinit":
				checkInitScript(t, dest)
			case "systemd":
				checkUnits(t, dest)
			}
		})
	}
}

// checkInitScript runs the installed init script's start under every POSIX
// shell here (dash; BusyBox ash when present) against a fake /proc/sys, and
// checks it writes what the handler prints for itself.
func checkInitScript(t *testing.T, dest string) {
	script, err := os.ReadFile(filepath.Join(dest, "etc/init.d/unwound"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HANDLER=/usr/bin/unwound-handler", "CONFIG=/etc/unwound/unwound.toml", "UPLOADER=/usr/bin/unwound-uploader", "CORE_PIPE_LIMIT=4"} {
		if !bytes.Contains(script, []byte("\n"+want+"\n")) {
			t.Errorf("init script has no line %q", want)
		}
	}
	shells := [][]string{{"dash"}, {"busybox", "sh"}}
	ran := 0
	for _, sh := range shells {
		if _, err := exec.LookPath(sh[0]); err != nil {
			continue
		}
		ran++
		fake := t.TempDir()
		for _, d := range []string{"kernel", "fs"} {
			if err := os.MkdirAll(filepath.Join(fake, "proc/sys", d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		s := string(script)
		s = strings.Replace(s, "HANDLER=/usr/bin/", "HANDLER="+dest+"/usr/bin/", 1)
		s = strings.Replace(s, "UPLOADER=/usr/bin/", "UPLOADER="+dest+"/usr/bin/", 1)
		s = strings.Replace(s, "PROC_SYS=/proc/sys", "PROC_SYS="+fake+"/proc/sys", 1)
		s = strings.Replace(s, `PIDFILE="/var/run/`, `PIDFILE="`+fake+"/", 1)
		s = strings.ReplaceAll(s, "/etc/default/$DAEMON", fake+"/default")
		path := filepath.Join(fake, "unwound")
		if err := os.WriteFile(path, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sh[0], append(sh[1:], path, "start")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s init script start: %v\n%s", sh[0], err, out)
			continue
		}
		exe, _ := filepath.EvalSymlinks(filepath.Join(dest, "usr/bin/unwound-handler"))
		self, _ := exec.Command(exe, "--config", "/etc/unwound/unwound.toml", "--core-pattern").Output()
		for file, want := range map[string]string{
			"kernel/core_pattern":    string(self),
			"kernel/core_pipe_limit": "4\n",
			"fs/suid_dumpable":       "2\n",
		} {
			b, err := os.ReadFile(filepath.Join(fake, "proc/sys", file))
			if err != nil || string(b) != want {
				t.Errorf("%s: init script wrote %q (%v), want %q", file, b, err, want)
			}
		}
		pidfile := filepath.Join(fake, "unwound.pid")
		if _, err := os.Stat(filepath.Join(dest, "usr/bin/unwound-uploader")); err == nil {
			// start-stop-daemon -b returns before its child has exec'd the
			// uploader; -K matches on /proc/PID/exe, so wait for the exec.
			b, err := os.ReadFile(pidfile)
			exe := ""
			for i := 0; err == nil && i < 100 && exe != filepath.Join(dest, "usr/bin/unwound-uploader"); i++ {
				time.Sleep(20 * time.Millisecond)
				exe, _ = os.Readlink("/proc/" + strings.TrimSpace(string(b)) + "/exe")
			}
			if exe != filepath.Join(dest, "usr/bin/unwound-uploader") {
				t.Errorf("%s init script start: uploader not running (pid file %q, %v, exe %q)", sh[0], b, err, exe)
			}
		}
		if out, err := exec.Command(sh[0], append(sh[1:], path, "stop")...).CombinedOutput(); err != nil {
			t.Errorf("%s init script stop: %v\n%s", sh[0], err, out)
		}
		if _, err := os.Stat(pidfile); err == nil {
			t.Errorf("%s init script stop left %s", sh[0], pidfile)
		}
	}
	if ran == 0 {
		t.Log("no dash or busybox here: init script not run")
	}
}

// checkUnits runs systemd-analyze verify, when it is here, on copies of the
// installed units whose binaries point into DESTDIR.
func checkUnits(t *testing.T, dest string) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("no systemd-analyze here: units not verified")
		return
	}
	units, _ := filepath.Glob(filepath.Join(dest, "usr/lib/systemd/system/*"))
	dir := t.TempDir()
	args := []string{"verify", "--man=no"}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("=/usr/bin/"), []byte("="+dest+"/usr/bin/"))
		p := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	if out, err := exec.Command("systemd-analyze", args...).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestInstallQueueDir(t *testing.T) {
	dest := shortTemp(t)
	out, err := makeIn(t, repoRoot(t), nil, "install", "DESTDIR="+dest, "INIT=none", "QUEUE_DIR=/data/unwound/queue")
	if err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	cfg, err := config.Load(filepath.Join(dest, "etc/unwound/unwound.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Queue.Dir != "/data/unwound/queue" {
		t.Errorf("queue.dir = %q", cfg.Queue.Dir)
	}
	st, err := os.Stat(filepath.Join(dest, "data/unwound/queue"))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("queue dir: %v %v", st, err)
	}
}

func TestInstallRefuses(t *testing.T) {
	long := "/" + strings.Repeat("p", 50)
	for _, tc := range []struct {
		name, arg, want string
	}{
		{"unknown INIT", "INIT=openrc", "INIT=openrc: use"},
		{"core_pattern over 127", "PREFIX=" + long, "core_pattern is 131 characters, the kernel keeps 127"},
		{"relative PREFIX", "PREFIX=usr", "must be an absolute path"},
		{"space in QUEUE_DIR", "QUEUE_DIR=/var/lib/un wound", "must contain no space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := shortTemp(t)
			out, err := makeIn(t, repoRoot(t), nil, "install", "DESTDIR="+dest, "INIT=systemd", tc.arg)
			if err == nil {
				t.Fatalf("make install %s succeeded:\n%s", tc.arg, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("make install %s said:\n%s\nwant %q", tc.arg, out, tc.want)
			}
			if entries, _ := os.ReadDir(dest); len(entries) != 0 {
				t.Errorf("make install %s failed but installed %d entries", tc.arg, len(entries))
			}
		})
	}
}

// TestDist makes the release tarball and builds it with no network and an
// empty module cache, then runs its own make install the way Yocto does.
func TestDist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release tarball")
	}
	top := distTree(t)
	for _, f := range []string{"go.mod", "LICENSE", "Makefile", "VERSION", "vendor/modules.txt", "configs/unwound.toml", "packaging/corepattern/main.go"} {
		if _, err := os.Stat(filepath.Join(top, f)); err != nil {
			t.Errorf("tarball lacks %s", f)
		}
	}
	offline := []string{"GOFLAGS=-mod=vendor", "GOPROXY=off", "GOMODCACHE=" + t.TempDir(), "GOTOOLCHAIN=local"}
	build := exec.Command("go", "build", "-o", t.TempDir(), "./cmd/...")
	build.Dir = top
	build.Env = append(os.Environ(), offline...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("offline build of the tarball: %v\n%s", err, out)
	}
	dest := shortTemp(t)
	// The tarball is shared with the other tests (TestYoctoRealTree copies
	// it into ${S} and checks nothing was written there): scratch files go
	// to a temporary INSTALL_WORK, as the recipe sends them to ${B}.
	out, err := makeIn(t, top, offline, "install", "DESTDIR="+dest, "INIT=systemd", "INSTALL_WORK="+t.TempDir())
	if err != nil {
		t.Fatalf("offline make install in the tarball: %v\n%s", err, out)
	}
	ver, err := exec.Command(filepath.Join(dest, "usr/bin/unwound-handler"), "--version").Output()
	if err != nil || strings.TrimSpace(string(ver)) != "unwound-handler 9.8.7-test" {
		t.Errorf("installed handler --version = %q, %v", ver, err)
	}
	if kv := sysctlConf(t, filepath.Join(dest, "usr/lib/sysctl.d/60-unwound.conf")); kv["kernel.core_pattern"] != handlerPattern(t, dest, "/usr", "/etc", "off") {
		t.Errorf("core_pattern from the tarball's install: %q", kv["kernel.core_pattern"])
	}
}

// TestInstallPrebuiltWithUploader installs binaries a build system made
// (PREBUILT=, as Yocto and Buildroot do) including an uploader, which this
// tree may not have yet: a stand-in script takes its place, so the uploader
// units and the init script's daemon handling are checked too.
func TestInstallPrebuiltWithUploader(t *testing.T) {
	root := repoRoot(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "./cmd/unwound-handler")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// A real binary, not a script: start-stop-daemon -K matches /proc/PID/exe.
	stand := t.TempDir()
	if err := os.WriteFile(filepath.Join(stand, "main.go"), []byte("package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Minute) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build = exec.Command("go", "build", "-o", filepath.Join(bin, "unwound-uploader"), "main.go")
	build.Dir = stand
	build.Env = append(os.Environ(), "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build stand-in uploader: %v\n%s", err, out)
	}
	for _, init := range []string{"systemd", "sysvinit"} {
		t.Run(init, func(t *testing.T) {
			dest := shortTemp(t)
			out, err := makeIn(t, root, nil, "install", "DESTDIR="+dest, "INIT="+init, "PREBUILT="+bin,
				"BOARD_CMDS=unwound-handler unwound-uploader")
			if err != nil {
				t.Fatalf("make install: %v\n%s", err, out)
			}
			got, want := tree(t, dest), installTree(init, true)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("installed tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			switch init {
			case "systemd":
				unit, err := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/unwound-uploader.service"))
				if err != nil || !bytes.Contains(unit, []byte("\nExecStart=/usr/bin/unwound-uploader --config /etc/unwound/unwound.toml\n")) {
					t.Errorf("unwound-uploader.service: %v\n%s", err, unit)
				}
				if bytes.Contains(unit, []byte("@")) {
					t.Errorf("unsubstituted template in unwound-uploader.service:\n%s", unit)
				}
				checkUnits(t, dest)
			case "sysvinit":
				checkInitScript(t, dest)
			}
		})
	}
}

// TestInstallCross installs for another GOARCH: the board binaries are built
// for it, static, while the core_pattern generator still runs on the host.
func TestInstallCross(t *testing.T) {
	dest := shortTemp(t)
	out, err := makeIn(t, repoRoot(t), nil, "install", "DESTDIR="+dest, "INIT=systemd", "GOOS=linux", "GOARCH=arm64")
	if err != nil {
		t.Fatalf("make install GOARCH=arm64: %v\n%s", err, out)
	}
	checkArm64Install(t, dest, true)
}

// checkArm64Install checks a cross install into dest: the handler is an
// AArch64 binary (static too, when static says so), and the core_pattern
// names it where it is installed.
func checkArm64Install(t *testing.T, dest string, static bool) {
	t.Helper()
	f, err := elf.Open(filepath.Join(dest, "usr/bin/unwound-handler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Errorf("installed handler is %v, want EM_AARCH64", f.Machine)
	}
	for _, p := range f.Progs {
		if static && p.Type == elf.PT_INTERP {
			t.Error("installed handler is dynamically linked")
		}
	}
	kv := sysctlConf(t, filepath.Join(dest, "usr/lib/sysctl.d/60-unwound.conf"))
	if want := "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml " + sysctl.PatternSpecifiers; kv["kernel.core_pattern"] != want {
		t.Errorf("core_pattern = %q, want %q", kv["kernel.core_pattern"], want)
	}
}

// crossGoWrapper writes a go wrapper made as oe-core's go-cross.inc makes
// <target>-go: it exports the target's GOARCH and GOOS whatever the caller
// set, then runs the real go.
func crossGoWrapper(t *testing.T, dir, name, goarch string) string {
	t.Helper()
	real, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	script := "#!/bin/bash\nexport GOARCH=\"" + goarch + "\"\nexport GOOS=\"linux\"\nexport GOARM=\"${GOARM:-}\"\n" + real + " \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestInstallCrossWrapper: make install behind a cross-Go wrapper that
// forces GOARCH (issue 18). As HOST_GO the wrapper is refused with the real
// cause; with the host's go as HOST_GO the board binaries come from the
// wrapper (arm64) and the generator runs here. Scratch files go to
// INSTALL_WORK.
func TestInstallCrossWrapper(t *testing.T) {
	tmp := shortTemp(t)
	wrapper := crossGoWrapper(t, tmp, "aarch64-poky-linux-go", "arm64")
	out, err := makeIn(t, repoRoot(t), nil, "install", "DESTDIR="+filepath.Join(tmp, "a"), "INIT=systemd",
		"GO="+wrapper, "INSTALL_WORK="+filepath.Join(tmp, "wa"))
	if err == nil {
		t.Fatalf("make install with the cross wrapper as HOST_GO succeeded:\n%s", out)
	}
	for _, want := range []string{"builds for linux/arm64, not for this build host", "cannot be HOST_GO"} {
		if !strings.Contains(out, want) {
			t.Errorf("make install said:\n%s\nwant %q", out, want)
		}
	}
	if strings.Contains(out, "shorter PREFIX") {
		t.Errorf("make install blames PREFIX:\n%s", out)
	}
	host, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	dest, work := filepath.Join(tmp, "b"), filepath.Join(tmp, "wb")
	out, err = makeIn(t, repoRoot(t), nil, "install", "DESTDIR="+dest, "INIT=systemd",
		"GO="+wrapper, "HOST_GO="+host, "INSTALL_WORK="+work)
	if err != nil {
		t.Fatalf("make install GO=<cross wrapper> HOST_GO=go: %v\n%s", err, out)
	}
	checkArm64Install(t, dest, false)
	if _, err := os.Stat(filepath.Join(work, "core_pattern")); err != nil {
		t.Errorf("INSTALL_WORK: %v", err)
	}
}

var (
	distOnce sync.Once
	distTop  string
	distErr  error
)

// distTree makes the release tarball once per run and returns its
// extracted top directory.
func distTree(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	if err := exec.Command("git", "-C", root, "rev-parse", "--git-dir").Run(); err != nil {
		t.Skip("not a git work tree")
	}
	distOnce.Do(func() {
		dir, err := os.MkdirTemp("", "unwound-dist")
		if err != nil {
			distErr = err
			return
		}
		distDir = dir
		cmd := exec.Command("make", "--no-print-directory", "dist", "VERSION=9.8.7-test", "DISTDIR="+dir)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			distErr = fmt.Errorf("make dist: %v\n%s", err, out)
			return
		}
		if out, err := exec.Command("tar", "-xzf", filepath.Join(dir, "unwound-9.8.7-test.tar.gz"), "-C", dir).CombinedOutput(); err != nil {
			distErr = fmt.Errorf("tar: %v\n%s", err, out)
			return
		}
		distTop = filepath.Join(dir, "unwound-9.8.7-test")
	})
	if distErr != nil {
		t.Fatal(distErr)
	}
	return distTop
}

var distDir string

// The release tarball carries the board binaries and the build-host tools,
// not the fleet collector and its SQLite (scripts/dist-prune.sh): its
// vendor/ holds no modernc.org module, everything in it builds offline,
// and the unwound built from it runs minidebuginfo and answers serve with
// an error that says what is missing.
func TestDistLeavesCollectorOut(t *testing.T) {
	if testing.Short() {
		t.Skip("make dist and a build: not in -short")
	}
	top := distTree(t)
	if _, err := os.Stat(filepath.Join(top, "vendor", "modernc.org")); err == nil {
		t.Error("vendor/ holds modernc.org: the collector's SQLite is in the tarball")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/...")
	build.Dir = top
	build.Env = append(os.Environ(), "GOFLAGS=-mod=vendor", "GOPROXY=off", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/... in the tarball: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "unwound"), "serve", "--dir", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "without the fleet collector") {
		t.Errorf("unwound serve from the tarball: %v\n%s", err, out)
	}
	out, _ = exec.Command(filepath.Join(bin, "unwound"), "minidebuginfo").CombinedOutput()
	if !strings.Contains(string(out), "usage: unwound minidebuginfo") {
		t.Errorf("unwound minidebuginfo from the tarball:\n%s", out)
	}
}

// TestInstallSocket: CORE_PATTERN_SOCKET=@@ points the sysctl file at the
// coredump socket, installs the socket-activated units (verified with a
// stand-in for systemd 262's systemd-coredump-register.service, which
// they must be ordered after, with no cycle), and makes the init script
// start the server, wait for its socket and only then write the line.
func TestInstallSocket(t *testing.T) {
	root := repoRoot(t)
	t.Run("systemd", func(t *testing.T) {
		dest := shortTemp(t)
		out, err := makeIn(t, root, nil, "install", "DESTDIR="+dest, "INIT=systemd", "CORE_PATTERN_SOCKET=@@")
		if err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
		kv := sysctlConf(t, filepath.Join(dest, "usr/lib/sysctl.d/60-unwound.conf"))
		if kv["kernel.core_pattern"] != "@@/run/unwound/coredump.sock" {
			t.Errorf("60-unwound.conf: %v", kv)
		}
		sock, err := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/unwound-coredump.socket"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"\nListenStream=/run/unwound/coredump.sock\n", "\nSocketMode=0600\n", "\nBacklog=4096\n",
			"\nAfter=systemd-sysctl.service systemd-coredump-register.service\n",
			`echo "@@/run/unwound/coredump.sock" > /proc/sys/kernel/core_pattern`,
		} {
			if !bytes.Contains(sock, []byte(want)) {
				t.Errorf("unwound-coredump.socket lacks %q", want)
			}
		}
		if bytes.Contains(sock, []byte("@SOCKET@")) || bytes.Contains(sock, []byte("@CONFIG@")) {
			t.Errorf("unsubstituted template:\n%s", sock)
		}
		// systemd 262's unit as far as ordering goes: it runs once early
		// and writes its own line.
		stub := filepath.Join(dest, "usr/lib/systemd/system/systemd-coredump-register.service")
		os.WriteFile(stub, []byte("[Unit]\nDescription=stand-in\nDefaultDependencies=no\nAfter=systemd-sysctl.service\nBefore=sysinit.target\n[Service]\nType=oneshot\nExecStart=/bin/true\n[Install]\nWantedBy=sysinit.target\n"), 0o644)
		checkUnits(t, dest)
	})
	t.Run("sysvinit", func(t *testing.T) {
		dest := shortTemp(t)
		out, err := makeIn(t, root, nil, "install", "DESTDIR="+dest, "INIT=sysvinit", "CORE_PATTERN_SOCKET=@@")
		if err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
		if kv := sysctlConf(t, filepath.Join(dest, "etc/sysctl.d/60-unwound.conf")); kv["kernel.core_pattern"] != "@@/run/unwound/coredump.sock" {
			t.Errorf("60-unwound.conf: %v", kv)
		}
		script, err := os.ReadFile(filepath.Join(dest, "etc/init.d/unwound"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(script, []byte("\nSOCKET=@@\n")) || !bytes.Contains(script, []byte("\nSOCKET_PATH=/run/unwound/coredump.sock\n")) {
			t.Fatalf("init script has no socket settings")
		}
		if _, err := exec.LookPath("dash"); err != nil {
			t.Skip("no dash")
		}
		fake := t.TempDir()
		for _, d := range []string{"kernel", "fs"} {
			os.MkdirAll(filepath.Join(fake, "proc/sys", d), 0o755)
		}
		sockPath := filepath.Join(fake, "s.sock")
		cfg := filepath.Join(fake, "u.toml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("[queue]\ndir = %q\nallow_volatile = true\n[rate_limit]\nstate_dir = %q\n", fake, fake)), 0o644)
		s := string(script)
		for _, r := range [][2]string{
			{"HANDLER=/usr/bin/", "HANDLER=" + dest + "/usr/bin/"},
			{"UPLOADER=/usr/bin/unwound-uploader", "UPLOADER=/nonexistent"},
			{"CONFIG=/etc/unwound/unwound.toml", "CONFIG=" + cfg},
			{"PROC_SYS=/proc/sys", "PROC_SYS=" + fake + "/proc/sys"},
			{"SOCKET_PATH=/run/unwound/coredump.sock", "SOCKET_PATH=" + sockPath},
			{`SERVER_PIDFILE="/var/run/`, `SERVER_PIDFILE="` + fake + "/"},
			{`PIDFILE="/var/run/`, `PIDFILE="` + fake + "/"},
			{"/etc/default/$DAEMON", fake + "/default"},
		} {
			s = strings.Replace(s, r[0], r[1], 1)
		}
		path := filepath.Join(fake, "unwound")
		os.WriteFile(path, []byte(s), 0o755)
		started, err := exec.Command("dash", path, "start").CombinedOutput()
		pidfile := filepath.Join(fake, "unwound-coredump.pid")
		defer func() {
			if b, err := os.ReadFile(pidfile); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					syscall.Kill(pid, syscall.SIGTERM)
				}
			}
		}()
		if err != nil {
			t.Fatalf("init script start: %v\n%s", err, started)
		}
		if fi, err := os.Stat(sockPath); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket %s: %v %v", sockPath, fi, err)
		}
		if b, _ := os.ReadFile(filepath.Join(fake, "proc/sys/kernel/core_pattern")); string(b) != "@@"+sockPath+"\n" {
			t.Errorf("core_pattern %q", b)
		}
		// A second start finds the server running and leaves it.
		if out, err := exec.Command("dash", path, "start").CombinedOutput(); err != nil {
			t.Errorf("second start: %v\n%s", err, out)
		}
	})
}
