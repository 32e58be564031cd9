package handler

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/sysctl"
)

// fakeProcSys is a /proc/sys holding the three crash settings.
func fakeProcSys(t *testing.T, pattern, limit, suid string) string {
	t.Helper()
	d := t.TempDir()
	for rel, v := range map[string]string{"kernel/core_pattern": pattern, "kernel/core_pipe_limit": limit, "fs/suid_dumpable": suid} {
		os.MkdirAll(filepath.Join(d, filepath.Dir(rel)), 0o755)
		if err := os.WriteFile(filepath.Join(d, rel), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestDrift(t *testing.T) {
	self, err := sysctl.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const cfg = "/etc/unwound/unwound.toml"
	ours, err := sysctl.Pattern(self, cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := "|/opt/unwound/bin/unwound-handler --config " + cfg + " " + sysctl.PatternSpecifiers
	for _, tc := range []struct {
		name, exe, pattern, limit, suid string
		want                            []string
	}{
		{"all well", self, ours, "4", "2", nil},
		{"systemd-coredump", self, "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h", "16", "2",
			[]string{"kernel.core_pattern is \"|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h\": systemd-coredump (/usr/lib/systemd/systemd-coredump), not unwound"}},
		{"kernel default", self, "core", "4", "2", []string{"the kernel's default"}},
		{"another unwound-handler path", self, other, "4", "2", []string{"another unwound-handler (/opt/unwound/bin/unwound-handler)"}},
		{"any unwound-handler (uploader, handler not found)", "", other, "4", "2", nil},
		{"wrong config (uploader)", "", "|/usr/bin/unwound-handler --config /etc/x.toml %P", "4", "2", []string{"kernel.core_pattern is"}},
		{"suid_dumpable 0", self, ours, "4", "0", []string{"fs.suid_dumpable is 0, not 2"}},
		{"pipe limit 0", self, ours, "0", "2", []string{"kernel.core_pipe_limit is 0"}},
		{"pipe limit at max_concurrent", self, ours, "2", "2", []string{"kernel.core_pipe_limit is 2, not above rate_limit.max_concurrent (2)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sysctl.Check(fakeProcSys(t, tc.pattern, tc.limit, tc.suid), tc.exe, cfg, 2)
			if len(got) != len(tc.want) {
				t.Fatalf("drift %q, want %d lines like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("drift %q lacks %q", got[i], w)
				}
			}
		})
	}
	var log bytes.Buffer
	LogDrift(NewLogger(&log), fakeProcSys(t, "core", "0", "0"), cfg, 2)
	if n := strings.Count(log.String(), "drift: "); n != 3 {
		t.Errorf("LogDrift logged %d drifts:\n%s", n, log.String())
	}
	if d := sysctl.Check(filepath.Join(t.TempDir(), "none"), self, cfg, 2); len(d) != 3 || !strings.Contains(d[0], "cannot read") {
		t.Errorf("unreadable settings: %q", d)
	}
}
