package sysctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConf(t *testing.T) {
	got := ParseConf([]byte("# c\n; c\n\nkernel.core_pattern = |/x a b\n-fs/suid_dumpable=2\nbad line\n kernel.core_pipe_limit\t=  4 \nkernel.core_pattern=core\n"))
	want := []KV{{"kernel.core_pattern", "|/x a b"}, {"fs.suid_dumpable", "2"}, {"kernel.core_pipe_limit", "4"}, {"kernel.core_pattern", "core"}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %v, want %v", i, got[i], want[i])
		}
	}
	if v, _ := Lookup(got, CorePattern); v != "core" {
		t.Errorf("Lookup takes the last value: %q", v)
	}
}

// TestBootFiles: names sort across directories, /etc hides /usr/lib, and
// /etc/sysctl.conf comes last (once, even behind systemd's 99-sysctl.conf).
func TestBootFiles(t *testing.T) {
	root := t.TempDir()
	w := func(rel, text string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(text), 0o644)
	}
	w("usr/lib/sysctl.d/50-coredump.conf", "kernel.core_pattern=|/lib/systemd/systemd-coredump\n")
	w("usr/lib/sysctl.d/60-unwound.conf", "kernel.core_pattern=|/usr/bin/unwound-handler\n")
	w("etc/sysctl.d/60-unwound.conf", "kernel.core_pattern=|/mine\n")
	w("run/sysctl.d/10-a.conf", "a=1\n")
	w("lib/sysctl.d/99-z.conf", "z=1\n")
	w("etc/sysctl.d/README", "not a conf\n")
	w("etc/sysctl.conf", "x=1\n")
	os.Symlink("../../../etc/sysctl.conf", filepath.Join(root, "usr/lib/sysctl.d/99-sysctl.conf"))
	var got []string
	for _, f := range BootFiles(root) {
		got = append(got, f.Path)
	}
	want := "/run/sysctl.d/10-a.conf /usr/lib/sysctl.d/50-coredump.conf /etc/sysctl.d/60-unwound.conf /usr/lib/sysctl.d/99-sysctl.conf /lib/sysctl.d/99-z.conf"
	if strings.Join(got, " ") != want {
		t.Errorf("boot files\n %s\nwant\n %s", strings.Join(got, " "), want)
	}
	os.Remove(filepath.Join(root, "usr/lib/sysctl.d/99-sysctl.conf"))
	if f := BootFiles(root); f[len(f)-1].Path != "/etc/sysctl.conf" {
		t.Errorf("without 99-sysctl.conf, /etc/sysctl.conf is not last: %v", f)
	}
}

func TestSameAndDescribe(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/bin/unwound-handler"), nil, 0o755)
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	a := "|/usr/bin/unwound-handler --config /etc/u.toml %P"
	if !Same(root, a, "|/bin/unwound-handler --config /etc/u.toml %P") {
		t.Error("merged /usr: the same handler through a symlink")
	}
	if Same(root, a, "|/usr/bin/unwound-handler --config /etc/v.toml %P") || Same(root, a, "core") {
		t.Error("different arguments or no pipe are not the same")
	}
	for p, want := range map[string]string{
		"core": "the kernel's default", "": "the kernel's default", "/tmp/core.%p": "core files written to /tmp/core.%p",
		"|/usr/libexec/abrt-hook-ccpp %s": "ABRT", "|/x/y": "the pipe helper /x/y", "|": "an empty pipe",
	} {
		if got := Describe(p); !strings.Contains(got, want) {
			t.Errorf("Describe(%q) = %q, want %q", p, got, want)
		}
	}
}

// FuzzParseConf: sysctl files come from anywhere on the board; parsing
// never panics and every key it returns is non-empty of '/'.
func FuzzParseConf(f *testing.F) {
	for _, s := range []string{
		"kernel.core_pattern = |/usr/bin/unwound-handler --config /etc/unwound/unwound.toml %P %I %s %t %d %c %E %e\nkernel.core_pipe_limit = 4\nfs.suid_dumpable = 2\n",
		"# comment\n; other\n-kernel/core_pattern=core\n", "=\n", "a=b=c\n", "\x00=\xff\n", "key\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, kv := range ParseConf(b) {
			if strings.Contains(kv.Key, "/") {
				t.Errorf("key %q keeps a '/'", kv.Key)
			}
		}
		Describe(string(b))
		Handler(string(b))
		Same("/nonexistent", string(b), string(b))
	})
}
