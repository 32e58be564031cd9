package sysctl

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
