package install

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/testbin"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// These tests install into scratch roots (--root) and, for applying
// settings, into a fake /proc/sys: never the host's. The real apply runs
// in a QEMU guest (qemu.TestInstallGuest).

// handlerBinary is cmd/unwound-handler, built once per test process.
func handlerBinary(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "unwound-handler", "")
}

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// scratchRoot is a board root with the handler in /usr/bin and a config
// that accepts a queue on the test machine's (possibly tmpfs) disk.
func scratchRoot(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "uw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	for _, d := range []string{"usr/bin", "etc/unwound"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(handlerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/unwound-handler"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "etc/unwound/unwound.toml", "[queue]\nallow_volatile = true\n")
	return root
}

func writeFile(t *testing.T, root, rel, text string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshot is every path under root with its mode and, for files, content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	testutil.Walk(t, root, func(rel, p string, mode fs.FileMode) {
		v := mode.String()
		if mode.IsRegular() && !strings.HasSuffix(rel, "unwound-handler") {
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out["/"+rel] = v
	})
	return out
}

// diff lists paths added, removed or changed from a to b.
func diff(a, b map[string]string) []string {
	var out []string
	for k, v := range b {
		if av, ok := a[k]; !ok {
			out = append(out, "+"+k+" "+strings.Fields(v)[0])
		} else if av != v {
			out = append(out, "~"+k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, "-"+k)
		}
	}
	sort.Strings(out)
	return out
}

func run(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "usr/bin/unwound-handler"), args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// boardPattern is what the handler installed in root prints for itself,
// with root taken off: the line the board's kernel must get.
func boardPattern(t *testing.T, root string) string {
	t.Helper()
	// install --root decides "auto" as off: the staged root boots
	// another kernel.
	out, err := run(t, root, "--pidfd", "off", "--core-pattern")
	if err != nil {
		t.Fatalf("--core-pattern: %v %s", err, out)
	}
	resolved, _ := filepath.EvalSymlinks(root)
	return "|" + strings.TrimPrefix(strings.TrimSpace(out), "|"+resolved)
}

// TestInstallScratchRoot: install writes exactly the sysctl file and the
// queue directory, with the handler's own core_pattern; a second install
// changes nothing; uninstall removes the file and keeps the queue.
func TestInstallScratchRoot(t *testing.T) {
	root := scratchRoot(t)
	before := snapshot(t, root)
	out, err := run(t, root, "install", "--root", root)
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	for _, want := range []string{"self-test: unwound a synthetic", "queue: created /var/lib/unwound/queue", "not applied now",
		"warning: nothing on this system applies /etc/sysctl.d at boot"} {
		if !strings.Contains(out, want) {
			t.Errorf("install output lacks %q:\n%s", want, out)
		}
	}
	after := snapshot(t, root)
	want := []string{"+/etc/sysctl.d drwxr-xr-x", "+/etc/sysctl.d/60-unwound.conf -rw-r--r--",
		"+/var drwxr-xr-x", "+/var/lib drwxr-xr-x", "+/var/lib/unwound drwxr-xr-x", "+/var/lib/unwound/queue drwx------"}
	if got := diff(before, after); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("install changed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	text, err := os.ReadFile(filepath.Join(root, ConfPath))
	if err != nil {
		t.Fatal(err)
	}
	kv := sysctl.ParseConf(text)
	pattern := boardPattern(t, root)
	if pattern != "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml "+sysctl.PatternSpecifiers {
		t.Errorf("the handler prints %q", pattern)
	}
	wantKV := []sysctl.KV{{Key: sysctl.CorePattern, Value: pattern}, {Key: sysctl.PipeLimit, Value: "4"}, {Key: sysctl.SuidDumpable, Value: "2"}}
	if len(kv) != 3 || kv[0] != wantKV[0] || kv[1] != wantKV[1] || kv[2] != wantKV[2] {
		t.Errorf("60-unwound.conf: %v, want %v", kv, wantKV)
	}
	if !bytes.HasPrefix(text, []byte(Marker+"\n")) || bytes.Contains(text, []byte(previousTag)) {
		t.Errorf("60-unwound.conf:\n%s", text)
	}

	// With something that applies sysctl.d at boot (Buildroot's BusyBox
	// init script here), no warning; a second install changes nothing else.
	writeFile(t, root, "etc/init.d/S02sysctl", "#!/bin/sh\n")
	after["/etc/init.d"] = snapshot(t, root)["/etc/init.d"]
	after["/etc/init.d/S02sysctl"] = snapshot(t, root)["/etc/init.d/S02sysctl"]
	if out, err := run(t, root, "install", "--root", root); err != nil || strings.Contains(out, "warning:") {
		t.Fatalf("second install: %v\n%s", err, out)
	}
	if got := diff(after, snapshot(t, root)); len(got) != 0 {
		t.Errorf("a second install changed %v", got)
	}
	os.RemoveAll(filepath.Join(root, "etc/init.d"))

	out, err = run(t, root, "uninstall", "--root", root)
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	want = []string{"+/etc/sysctl.d drwxr-xr-x", "+/var drwxr-xr-x", "+/var/lib drwxr-xr-x", "+/var/lib/unwound drwxr-xr-x", "+/var/lib/unwound/queue drwx------"}
	if got := diff(before, snapshot(t, root)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after uninstall:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if out, err := run(t, root, "uninstall", "--root", root); err != nil || !strings.Contains(out, "nothing to remove") {
		t.Errorf("second uninstall: %v %s", err, out)
	}
}

const coredumpConf = "kernel.core_pattern=|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h\nkernel.core_pipe_limit=16\nfs.suid_dumpable=2\n"

// TestInstallRefusesForeign: another handler's core_pattern in a boot file
// is never replaced without --force; the refusal names it and changes
// nothing; --force replaces it and says so.
func TestInstallRefusesForeign(t *testing.T) {
	for _, tc := range []struct {
		name, file, text, says string
		later                  bool
	}{
		{"systemd-coredump", "usr/lib/sysctl.d/50-coredump.conf", coredumpConf, "systemd-coredump (/usr/lib/systemd/systemd-coredump)", false},
		{"apport in sysctl.conf", "etc/sysctl.conf", "kernel.core_pattern = |/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E\n", "Ubuntu's apport", true},
		{"core files", "etc/sysctl.d/10-cores.conf", "kernel.core_pattern = /var/crash/core.%e.%p\n", "core files written to /var/crash/core.%e.%p", false},
		{"hand-written 60-unwound.conf", "etc/sysctl.d/60-unwound.conf", "kernel.core_pattern = |/opt/x/helper %p\n", "not written by unwound-handler install", false},
		{"another unwound", "usr/lib/sysctl.d/60-unwound.conf", "kernel.core_pattern = |/opt/unwound/bin/unwound-handler --config /etc/unwound/unwound.toml %P %I %s %t %d %c %E %e\n", "another unwound-handler (/opt/unwound/bin/unwound-handler)", false},
		{"later file", "etc/sysctl.d/99-local.conf", "kernel.core_pattern = |/usr/sbin/mycrash %p\n", "the pipe helper /usr/sbin/mycrash", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := scratchRoot(t)
			writeFile(t, root, tc.file, tc.text)
			before := snapshot(t, root)
			out, err := run(t, root, "install", "--root", root)
			if err == nil {
				t.Fatalf("install over %s succeeded:\n%s", tc.file, out)
			}
			if code := err.(*exec.ExitError).ExitCode(); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			for _, want := range []string{"another crash handler is installed", "/" + tc.file, tc.says, "--force"} {
				if !strings.Contains(out, want) {
					t.Errorf("refusal lacks %q:\n%s", want, out)
				}
			}
			if got := diff(before, snapshot(t, root)); len(got) != 0 {
				t.Errorf("a refused install changed %v", got)
			}

			out, err = run(t, root, "install", "--root", root, "--force")
			if err != nil {
				t.Fatalf("install --force: %v\n%s", err, out)
			}
			if !strings.Contains(out, "replacing: /"+tc.file) {
				t.Errorf("install --force does not say what it replaces:\n%s", out)
			}
			if tc.later != strings.Contains(out, "would override it at every boot") {
				t.Errorf("later file %v, output:\n%s", tc.later, out)
			}
			text, _ := os.ReadFile(filepath.Join(root, ConfPath))
			if v, _ := sysctl.Lookup(sysctl.ParseConf(text), sysctl.CorePattern); v != boardPattern(t, root) {
				t.Errorf("after --force core_pattern = %q", v)
			}
			// The foreign file itself is never edited (only our own
			// path is overwritten).
			if tc.file != "etc/sysctl.d/60-unwound.conf" {
				if b, _ := os.ReadFile(filepath.Join(root, tc.file)); string(b) != tc.text {
					t.Errorf("%s was changed", tc.file)
				}
			}
		})
	}
}

// TestInstallUsage: a handler outside --root and unknown arguments are
// refused; the kernel default and our own line in a boot file are not
// foreign.
func TestInstallUsage(t *testing.T) {
	root := scratchRoot(t)
	other := t.TempDir()
	if out, err := exec.Command(handlerBinary(t), "install", "--root", other).CombinedOutput(); err == nil || !strings.Contains(string(out), "is not inside --root") {
		t.Errorf("handler outside the root: %v %s", err, out)
	}
	if out, err := run(t, root, "install", "--root", root, "extra"); err == nil || err.(*exec.ExitError).ExitCode() != 2 {
		t.Errorf("extra argument: %v %s", err, out)
	}
	writeFile(t, root, "etc/sysctl.conf", "kernel.core_pattern = core\n")
	writeFile(t, root, "usr/lib/sysctl.d/60-unwound.conf", "kernel.core_pattern = "+boardPattern(t, root)+"\n")
	if out, err := run(t, root, "install", "--root", root); err != nil {
		t.Errorf("install beside the kernel default and a package's identical line: %v\n%s", err, out)
	}
	// A broken configuration fails the install, naming each bad key and
	// its line, so a postinst stops on a typo.
	writeFile(t, root, "etc/unwound/unwound.toml", "[queue]\nmax_entries = 0\n[handler]\nmax_threads = 1.5\n")
	out, err := run(t, root, "install", "--root", root)
	if err == nil {
		t.Errorf("broken configuration installed:\n%s", out)
	}
	for _, want := range []string{"unwound.toml:2: queue.max_entries: 0 out of range", "unwound.toml:4: handler.max_threads: \"1.5\""} {
		if !strings.Contains(out, want) {
			t.Errorf("broken configuration: output lacks %q:\n%s", want, out)
		}
	}
}

// fakeProc is a /proc/sys with the three files, for the apply path.
func fakeProc(t *testing.T, pattern, limit, suid string) string {
	t.Helper()
	d := t.TempDir()
	writeFile(t, d, "kernel/core_pattern", pattern+"\n")
	writeFile(t, d, "kernel/core_pipe_limit", limit+"\n")
	writeFile(t, d, "fs/suid_dumpable", suid+"\n")
	return d
}

// TestInstallApply: on a running system install applies the settings,
// refuses a live foreign core_pattern without Force, and uninstall puts
// back what it found, but only where the values are still ours.
func TestInstallApply(t *testing.T) {
	root := scratchRoot(t)
	exe := filepath.Join(root, "usr/bin/unwound-handler")
	pattern := boardPattern(t, root)
	foreign := "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h"
	proc := fakeProc(t, foreign, "16", "0")
	var log bytes.Buffer
	o := Options{Root: root, ProcSys: proc, Exe: exe, Out: &log}

	err := Install(o)
	if err == nil || !strings.Contains(err.Error(), "the running kernel sets kernel.core_pattern = "+foreign) {
		t.Fatalf("install over a live systemd-coredump: %v", err)
	}
	if v := sysctl.Read(proc); v.CorePattern != foreign || v.PipeLimit != "16" || v.SuidDumpable != "0" {
		t.Errorf("refused install changed the kernel: %+v", v)
	}
	if _, err := os.Stat(filepath.Join(root, ConfPath)); err == nil {
		t.Error("refused install wrote the sysctl file")
	}
	for _, want := range []string{"now: kernel.core_pattern is", "systemd-coredump", "now: fs.suid_dumpable is 0"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("install did not report the drift %q:\n%s", want, log.String())
		}
	}

	o.Force = true
	if err := Install(o); err != nil {
		t.Fatal(err)
	}
	if v := sysctl.Read(proc); v.CorePattern != pattern || v.PipeLimit != "4" || v.SuidDumpable != "2" {
		t.Errorf("applied: %+v", v)
	}
	if d := sysctl.Drift(sysctl.Read(proc), sysctl.Want{CorePattern: pattern, MaxConcurrent: 2}); len(d) != 0 {
		t.Errorf("drift after install: %v", d)
	}
	text, _ := os.ReadFile(filepath.Join(root, ConfPath))
	prev := previousOf(text)
	if len(prev) != 3 || prev[0].Value != foreign || prev[1].Value != "16" || prev[2].Value != "0" {
		t.Errorf("recorded previous settings %v", prev)
	}
	// Installing again (now without force: the live line is ours) keeps
	// the first record.
	o.Force = false
	if err := Install(o); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, ConfPath)); !bytes.Equal(b, text) {
		t.Errorf("reinstall changed the file:\n%s", b)
	}

	// Somebody raises core_pipe_limit afterwards: uninstall leaves it.
	sysctl.Write(proc, sysctl.PipeLimit, "8")
	if err := Uninstall(o); err != nil {
		t.Fatal(err)
	}
	if v := sysctl.Read(proc); v.CorePattern != foreign || v.PipeLimit != "8" || v.SuidDumpable != "0" {
		t.Errorf("after uninstall: %+v", v)
	}
	if _, err := os.Stat(filepath.Join(root, ConfPath)); err == nil {
		t.Error("uninstall left the sysctl file")
	}
}

// TestInstallApplyFails: when the kernel refuses a setting (not root), the
// board is left as it was.
func TestInstallApplyFails(t *testing.T) {
	root := scratchRoot(t)
	proc := fakeProc(t, "core", "0", "0")
	// Readable, but every write fails (EIO), as a setting the kernel
	// refuses does.
	os.Remove(filepath.Join(proc, "fs/suid_dumpable"))
	if err := os.Symlink("/proc/version", filepath.Join(proc, "fs/suid_dumpable")); err != nil {
		t.Fatal(err)
	}
	o := Options{Root: root, ProcSys: proc, Exe: filepath.Join(root, "usr/bin/unwound-handler")}
	err := Install(o)
	if err == nil || !strings.Contains(err.Error(), "applying the settings") {
		t.Fatalf("install with an unwritable setting: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, ConfPath)); err == nil {
		t.Error("failed install left the sysctl file")
	}
	if v := sysctl.Read(proc); v.CorePattern != "core" || v.PipeLimit != "0" {
		t.Errorf("failed install left %+v", v)
	}
}

// TestUninstallForeignFile: uninstall never removes a sysctl file it did
// not write unless forced, and leaves a live core_pattern that is not ours.
func TestUninstallForeignFile(t *testing.T) {
	root := scratchRoot(t)
	writeFile(t, root, ConfPath, "kernel.core_pattern = |/usr/bin/unwound-handler --config /etc/unwound/unwound.toml %P %I %s %t %d %c %E %e\n")
	proc := fakeProc(t, "|/sbin/other %p", "1", "1")
	o := Options{Root: root, ProcSys: proc, Exe: filepath.Join(root, "usr/bin/unwound-handler")}
	if err := Uninstall(o); err == nil || !strings.Contains(err.Error(), "not written by unwound-handler install") {
		t.Fatalf("uninstall of a package's file: %v", err)
	}
	var log bytes.Buffer
	o.Force, o.Out = true, &log
	if err := Uninstall(o); err != nil {
		t.Fatal(err)
	}
	if v := sysctl.Read(proc); v.CorePattern != "|/sbin/other %p" || v.PipeLimit != "1" {
		t.Errorf("uninstall changed a foreign live setting: %+v", v)
	}
	if !strings.Contains(log.String(), "is not ours: left as it is") {
		t.Errorf("uninstall output:\n%s", log.String())
	}
}

// TestKuserNote: install says whether GOARM=5/6 builds can run, from the
// [vectors] page in a 32-bit ARM process's maps.
func TestKuserNote(t *testing.T) {
	with := "00010000-00011000 r-xp 00000000 00:0e 1234 /usr/bin/unwound-handler\nffff0000-ffff1000 r-xp 00000000 00:00 0          [vectors]\n"
	without := "00010000-00011000 r-xp 00000000 00:0e 1234 /usr/bin/unwound-handler\nbefdf000-bf000000 rw-p 00000000 00:00 0 [stack]\n"
	for _, c := range []struct {
		maps   string
		needed bool
		want   string
	}{
		{with, false, "GOARM=5/6 builds of unwound would run too"},
		{with, true, "this GOARM=5/6 build needs them"},
		{without, false, "warning: the kernel maps no ARM user helpers"},
	} {
		if got := KuserNote(strings.NewReader(c.maps), c.needed); !strings.Contains(got, c.want) {
			t.Errorf("KuserNote(needed=%v) = %q, want it to contain %q", c.needed, got, c.want)
		}
	}
}

// choiceOptions installs on a kernel release into this system (root "/")
// or a staged root holding the handler, for the core_pattern choices.
func choiceOptions(t *testing.T, root, release string) Options {
	o := Options{Root: "/", Exe: "/usr/bin/unwound-handler", Config: "/etc/unwound/unwound.toml", KernelRelease: release}
	if root == "staged" {
		o.Root = t.TempDir()
		o.Exe = filepath.Join(o.Root, "usr/bin/unwound-handler")
		writeFile(t, o.Root, "usr/bin/unwound-handler", "")
	}
	return o
}

// The line install writes asks for the pidfd when the running kernel
// passes one (auto), or as told; a staged root's auto is off.
func TestInstallPidfdChoice(t *testing.T) {
	for _, tc := range []struct {
		root, mode, release string
		want                bool
	}{
		{"/", "auto", "6.18.44-fc-v657", true},
		{"/", "", "6.16.0", true},
		{"/", "auto", "6.12.40", false},
		{"/", "on", "6.1.0", true},
		{"/", "off", "6.18.0", false},
		{"staged", "auto", "6.18.0", false},
		{"staged", "on", "6.1.0", true},
	} {
		o := choiceOptions(t, tc.root, tc.release)
		o.Pidfd = tc.mode
		p, err := o.Pattern()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(p, sysctl.PidfdArg); got != tc.want {
			t.Errorf("%+v: %q", tc, p)
		}
	}
	o := Options{Root: "/", Exe: "/usr/bin/unwound-handler", Pidfd: "sometimes"}
	if _, err := o.Pattern(); err == nil {
		t.Errorf("--pidfd sometimes accepted")
	}
}

func TestInstallSocketChoice(t *testing.T) {
	for _, tc := range []struct {
		root, mode, release string
		want                string // the pattern's start: "|" the pipe
	}{
		{"/", "", "6.18.0", "|"},
		{"/", "off", "6.18.0", "|"},
		{"/", "auto", "6.18.44-fc-v782", "@@/run/unwound/coredump.sock"},
		{"/", "auto", "6.16.3", "@/run/unwound/coredump.sock"},
		{"/", "auto", "6.12.40", "|"},
		{"/", "on", "6.12.40", "error"},
		{"/", "@", "6.18.0", "@/run/unwound/coredump.sock"},
		{"staged", "auto", "6.18.0", "|"},
		{"staged", "on", "6.1.0", "@@/run/unwound/coredump.sock"},
		{"staged", "@", "6.1.0", "@/run/unwound/coredump.sock"},
		{"/", "sometimes", "6.18.0", "error"},
	} {
		o := choiceOptions(t, tc.root, tc.release)
		o.Socket = tc.mode
		p, err := o.Pattern()
		switch {
		case tc.want == "error":
			if err == nil {
				t.Errorf("%+v: %q accepted", tc, p)
			}
		case err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.want == "|" && !strings.HasPrefix(p, "|"), tc.want != "|" && p != tc.want:
			t.Errorf("%+v: %q, want %q", tc, p, tc.want)
		}
	}
}

// TestInstallApplySocket: install --socket writes and applies the socket
// line, says that no server listens yet, and uninstall puts back the
// previous line.
func TestInstallApplySocket(t *testing.T) {
	root := scratchRoot(t)
	exe := filepath.Join(root, "usr/bin/unwound-handler")
	proc := fakeProc(t, "core", "0", "0")
	var log bytes.Buffer
	o := Options{Root: root, ProcSys: proc, Exe: exe, Socket: "@@", Out: &log}
	if err := Install(o); err != nil {
		t.Fatal(err)
	}
	if v := sysctl.Read(proc); v.CorePattern != "@@"+sysctl.DefaultSocket {
		t.Errorf("applied %q", v.CorePattern)
	}
	text, _ := os.ReadFile(filepath.Join(root, ConfPath))
	if !strings.Contains(string(text), "kernel.core_pattern = @@"+sysctl.DefaultSocket+"\n") || !strings.Contains(string(text), "--serve-coredump-socket") {
		t.Errorf("file:\n%s", text)
	}
	if !strings.Contains(log.String(), "no coredump socket at "+sysctl.DefaultSocket) {
		t.Errorf("no warning about the missing server:\n%s", log.String())
	}
	// Installing again is not a foreign handler: the socket line is ours.
	if err := Install(o); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(o); err != nil {
		t.Fatal(err)
	}
	if v := sysctl.Read(proc); v.CorePattern != "core" {
		t.Errorf("after uninstall: %q", v.CorePattern)
	}
}
