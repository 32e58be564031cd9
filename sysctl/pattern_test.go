package sysctl

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The core_pattern line's forms beyond the plain pipe: the crashed
// process's pidfd (%F, Linux 6.16+) and the coredump socket (@ and @@):
// which kernels take them, the lines unwound writes, and how Same and the
// drift check read them.

func TestPidfdSupported(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.18.44-fc-v657": true,
		"6.16":            true,
		"6.16.0-rc1":      true,
		"6.15.9":          false,
		"6.12.40-yocto":   false,
		"6.1.0-37-arm64":  false,
		"7.2.0-rc1":       true,
		"7.0":             true,
		"5.19.17":         false,
		"10.1.0":          true,
		"6.17rc2":         true,
		"":                false,
		"6":               false,
		"x.y":             false,
		"6.-1":            false,
	} {
		if got := PidfdSupported(rel); got != want {
			t.Errorf("PidfdSupported(%q) = %v, want %v", rel, got, want)
		}
	}
}

func TestChoosePidfd(t *testing.T) {
	for _, tc := range []struct {
		mode, rel string
		want, bad bool
	}{
		{"on", "5.10.0", true, false},
		{"off", "6.18.0", false, false},
		{"auto", "6.18.0", true, false},
		{"auto", "6.15.0", false, false},
		{"", "6.16.1", true, false},
		{"yes", "6.18.0", false, true},
	} {
		got, err := ChoosePidfd(tc.mode, tc.rel)
		if got != tc.want || (err != nil) != tc.bad {
			t.Errorf("ChoosePidfd(%q, %q) = %v, %v", tc.mode, tc.rel, got, err)
		}
	}
	// "auto" with no release asks the running kernel.
	got, _ := ChoosePidfd("auto", "")
	if got != PidfdSupported(KernelRelease()) || KernelRelease() == "" {
		t.Errorf("auto on %q: %v", KernelRelease(), got)
	}
}

func TestPatternFor(t *testing.T) {
	const exe, cfg = "/usr/bin/unwound-handler", "/etc/unwound/unwound.toml"
	without, err1 := PatternFor(exe, cfg, false)
	with, err2 := PatternFor(exe, cfg, true)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if want := "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml %P %I %s %t %d %c %E %e"; without != want {
		t.Errorf("without: %q", without)
	}
	if want := "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml --pidfd=%F %P %I %s %t %d %c %E %e"; with != want {
		t.Errorf("with: %q", with)
	}
	if p, _ := Pattern(exe, cfg); p != without {
		t.Errorf("Pattern %q", p)
	}
	// The comm (%e) stays last: kernels before 5.3 split it on spaces.
	if !strings.HasSuffix(with, " %e") {
		t.Errorf("%q: %%e not last", with)
	}
	// The 127-character limit counts the pidfd argument: a path that fits
	// without it may not fit with it.
	long := "/" + strings.Repeat("d", 127-len(without)+len(exe)-1-len("/unwound-handler")) + "/unwound-handler"
	if p, err := PatternFor(long, cfg, false); err != nil || len(p) != MaxPattern {
		t.Fatalf("%d characters without: %v", len(p), err)
	}
	if _, err := PatternFor(long, cfg, true); err == nil || !strings.Contains(err.Error(), "127") {
		t.Errorf("over 127 characters with %s: %v", PidfdArg, err)
	}
	// auto then writes the line without; on refuses.
	if p, err := PatternMode(long, cfg, "auto", "6.18.0"); err != nil || strings.Contains(p, PidfdArg) {
		t.Errorf("auto, too long with the pidfd: %q %v", p, err)
	}
	if _, err := PatternMode(long, cfg, "on", "6.18.0"); err == nil {
		t.Errorf("on, too long with the pidfd: accepted")
	}
	if p, err := PatternMode(exe, cfg, "auto", "6.18.0"); err != nil || p != with {
		t.Errorf("auto on 6.18: %q %v", p, err)
	}
}

// The drift check and install take a line with and without the pidfd as
// the same handler.
func TestSameWithPidfd(t *testing.T) {
	const exe, cfg = "/usr/bin/unwound-handler", "/etc/unwound/unwound.toml"
	without, _ := PatternFor(exe, cfg, false)
	with, _ := PatternFor(exe, cfg, true)
	if !Same("/", with, without) || !Same("/", without, with) {
		t.Errorf("lines with and without %s differ", PidfdArg)
	}
	other, _ := PatternFor(exe, "/etc/other.toml", true)
	if Same("/", with, other) {
		t.Errorf("another config is the same")
	}
	if Same("/", with, strings.Replace(with, "--pidfd=%F", "--pidfd=%P", 1)) {
		t.Errorf("a different argument is the same")
	}
	for _, w := range []Want{{CorePattern: without, Root: "/"}, {CorePattern: with, Root: "/"}, {Config: cfg}} {
		for _, live := range []string{with, without} {
			if d := Drift(Values{CorePattern: live, PipeLimit: "4", SuidDumpable: "2"}, w); len(d) != 0 {
				t.Errorf("want %+v, live %q: drift %q", w, live, d)
			}
		}
	}
	if prog, c := Handler(with); prog != exe || c != cfg {
		t.Errorf("Handler(%q) = %q, %q", with, prog, c)
	}
}

func FuzzPidfdSupported(f *testing.F) {
	for _, s := range []string{"6.18.44-fc-v657", "6.16", "6.15.9", "7.2.0-rc1", "6.17rc2", "", "6", "99999999999999999999.1", "6.+16"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		if PidfdSupported(rel) && !(rel[0] >= '0' && rel[0] <= '9' || rel[0] == '+' || rel[0] == '-') {
			t.Fatalf("%q taken as a release", rel)
		}
	})
}

func TestSocketPattern(t *testing.T) {
	for _, c := range []struct {
		in      string
		path    string
		request bool
	}{
		{"@@/run/unwound/coredump.sock", "/run/unwound/coredump.sock", true},
		{"@/run/x.sock", "/run/x.sock", false},
		{" @@/a\n", "/a", true},
		{"|/usr/bin/unwound-handler --config /etc/u.toml %P", "", false},
		{"core", "", false},
	} {
		p, r := SocketPath(c.in)
		if p != c.path || r != c.request {
			t.Errorf("SocketPath(%q) = %q %v, want %q %v", c.in, p, r, c.path, c.request)
		}
	}
	if p, err := SocketPattern(DefaultSocket, true); err != nil || p != "@@"+DefaultSocket {
		t.Errorf("SocketPattern: %q %v", p, err)
	}
	for _, bad := range []string{"run/x", "/run/../x", "/" + strings.Repeat("x", 107)} {
		if _, err := SocketPattern(bad, true); err == nil {
			t.Errorf("SocketPattern(%q) accepted", bad)
		}
	}
	for rel, want := range map[string][2]bool{
		"6.15.9": {false, false}, "6.16.0": {true, false}, "6.17-rc1": {true, true},
		"6.18.44-fc-v782": {true, true}, "7.2.0": {true, true}, "x": {false, false},
	} {
		if p, r := SocketSupported(rel); p != want[0] || r != want[1] {
			t.Errorf("SocketSupported(%q) = %v %v, want %v", rel, p, r, want)
		}
	}
	if !Same("/", "@@/run/u.sock", "@/run/u.sock") || Same("/", "@@/run/u.sock", "@@/run/v.sock") {
		t.Error("Same: @ and @@ of one socket are one server, other sockets are not")
	}
	if d := Describe("@@/run/systemd/coredumpd/kernel"); !strings.Contains(d, "systemd-coredumpd") {
		t.Errorf("Describe: %q", d)
	}
}

// TestSocketDrift: the drift check knows the socket forms: unwound's
// socket is fine while it exists, a missing socket drops every core,
// another socket is another tool, and core_pipe_limit matters to "@"
// (whether the kernel waits) but not to "@@".
func TestSocketDrift(t *testing.T) {
	root := t.TempDir()
	sock := "/run/unwound/coredump.sock"
	v := Values{CorePattern: "@@" + sock, PipeLimit: "0", SuidDumpable: "2"}
	w := Want{Root: root, MaxConcurrent: 2}
	d := strings.Join(Drift(v, w), "\n")
	if !strings.Contains(d, "no socket at "+sock) || strings.Contains(d, PipeLimit) {
		t.Errorf("missing socket, @@: %q", d)
	}
	os.MkdirAll(filepath.Join(root, "run/unwound"), 0o755)
	l, err := net.Listen("unix", filepath.Join(root, sock))
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	if d := Drift(v, w); len(d) != 0 {
		t.Errorf("socket there, @@: %q", d)
	}
	v.CorePattern = "@" + sock
	if d := strings.Join(Drift(v, w), "\n"); !strings.Contains(d, PipeLimit+" is 0") {
		t.Errorf("@ with core_pipe_limit 0: %q", d)
	}
	v.PipeLimit = "1"
	if d := Drift(v, w); len(d) != 0 {
		t.Errorf("@ with core_pipe_limit 1 (max_concurrent does not bound a socket): %q", d)
	}
	v.CorePattern = "@@/run/systemd/coredumpd/kernel"
	if d := strings.Join(Drift(v, w), "\n"); !strings.Contains(d, "systemd-coredumpd") || !strings.Contains(d, "@@"+DefaultSocket) {
		t.Errorf("systemd's socket: %q", d)
	}
	w.Socket = "/run/systemd/coredumpd/kernel"
	if d := Drift(v, w); len(d) == 1 && strings.Contains(d[0], "not unwound") {
		t.Errorf("a configured socket is unwound's: %q", d)
	}
}

// TestCheckServedSocket: the server's own socket, named in its
// environment (SocketEnv), is unwound's wherever it is.
func TestCheckServedSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	proc := filepath.Join(dir, "proc")
	for rel, v := range map[string]string{"kernel/core_pattern": "@@" + sock, "kernel/core_pipe_limit": "0", "fs/suid_dumpable": "2"} {
		os.MkdirAll(filepath.Join(proc, filepath.Dir(rel)), 0o755)
		os.WriteFile(filepath.Join(proc, rel), []byte(v+"\n"), 0o644)
	}
	if d := Check(proc, "", "/etc/u.toml", 2); len(d) != 1 || !strings.Contains(d[0], "not unwound") {
		t.Errorf("without %s: %q", SocketEnv, d)
	}
	t.Setenv(SocketEnv, sock)
	if d := Check(proc, "", "/etc/u.toml", 2); len(d) != 0 {
		t.Errorf("with %s: %q", SocketEnv, d)
	}
}

func TestUnixListening(t *testing.T) {
	text := []byte("Num       RefCount Protocol Flags    Type St Inode Path\n" +
		"0000000000000000: 00000002 00000000 00010000 0001 01 21836 /run/unwound/coredump.sock\n" +
		"0000000000000000: 00000002 00000000 00000000 0001 01 21837 /run/other.sock\n" +
		"0000000000000000: 00000003 00000000 00000000 0001 03 21838\n")
	if !UnixListening(text, "/run/unwound/coredump.sock") || UnixListening(text, "/run/other.sock") || UnixListening(text, "/x") {
		t.Error("UnixListening")
	}
	if _, err := os.Stat("/proc/net/unix"); err == nil {
		sock := filepath.Join(t.TempDir(), "l.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Skip(err)
		}
		defer l.Close()
		b, _ := os.ReadFile("/proc/net/unix")
		if !UnixListening(b, sock) {
			t.Errorf("a listening socket at %s not found in /proc/net/unix", sock)
		}
	}
}
