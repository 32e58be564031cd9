package qemu

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/qemu/guest"
	"github.com/unwound-dev/unwound/sysctl"
)

// TestInstallGuest runs `unwound-handler install` and `uninstall` on a
// real kernel (the host's /proc/sys is never touched): with
// systemd-coredump's core_pattern in place install refuses and changes
// nothing; --force applies the three settings to /proc/sys at once and
// writes 60-unwound.conf; uninstall puts back what it found.
func TestInstallGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	kernel, err := Kernel("aarch64")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	r := NewInitramfs()
	r.HostFile("/init", 0o755, goBuild(t, "github.com/unwound-dev/unwound/qemu/cmd/guestinit", "aarch64", filepath.Join(work, "init")))
	h := "/usr/bin/unwound-handler"
	r.HostFile(h, 0o755, goBuild(t, "github.com/unwound-dev/unwound/cmd/unwound-handler", "aarch64", filepath.Join(work, "unwound-handler")))
	// The initramfs is RAM: accept a volatile queue.
	r.File("/etc/unwound/unwound.toml", 0o644, []byte("[queue]\nallow_volatile = true\n"))
	// The 32-bit ARM (GOARM=7) build, installing into a board root, says
	// whether this kernel (arm64 with COMPAT and KUSER_HELPERS) would run
	// GOARM=5/6 builds.
	armRoot := "/armroot"
	r.HostFile(armRoot+h, 0o755, goBuild(t, "github.com/unwound-dev/unwound/cmd/unwound-handler", "arm", filepath.Join(work, "unwound-handler-arm")))
	r.File(armRoot+"/etc/unwound/unwound.toml", 0o644, []byte("[queue]\nallow_volatile = true\n"))
	const foreign = "|/usr/lib/systemd/systemd-coredump %P %u %g %s %t %c %h"
	settings := func(as string) []guest.Step {
		var s []guest.Step
		for _, f := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/core_pipe_limit", "/proc/sys/fs/suid_dumpable"} {
			s = append(s, guest.Step{Ship: f, As: as})
		}
		return s
	}
	steps := []guest.Step{
		{Write: "/proc/sys/kernel/core_pattern", Data: foreign},
		{Write: "/proc/sys/kernel/core_pipe_limit", Data: "16"},
		{Run: []string{h, "install"}},
	}
	steps = append(steps, settings("refused")...)
	steps = append(steps, guest.Step{Run: []string{h, "install", "--force"}, MustSucceed: true},
		guest.Step{Ship: "/etc/sysctl.d/60-unwound.conf", As: "installed"})
	steps = append(steps, settings("installed")...)
	steps = append(steps, guest.Step{Run: []string{h, "uninstall"}, MustSucceed: true})
	steps = append(steps, settings("uninstalled")...)
	steps = append(steps, guest.Step{Run: []string{armRoot + h, "install", "--root", armRoot}, MustSucceed: true})
	js, _ := json.Marshal(guest.Plan{Steps: steps})
	r.File("/plan.json", 0o644, js)

	m := &Machine{Arch: "aarch64", Kernel: kernel, Initramfs: r, Timeout: 5 * time.Minute, Dir: work}
	res, err := m.Run(context.Background())
	if err != nil {
		if res != nil {
			t.Log(res.Console)
		}
		t.Fatal(err)
	}
	ours := "|" + h + " --config /etc/unwound/unwound.toml " + sysctl.PatternSpecifiers
	want := map[string]string{
		"refused/core_pattern": foreign, "refused/core_pipe_limit": "16", "refused/suid_dumpable": "0",
		"installed/core_pattern": ours, "installed/core_pipe_limit": "4", "installed/suid_dumpable": "2",
		"uninstalled/core_pattern": foreign, "uninstalled/core_pipe_limit": "16", "uninstalled/suid_dumpable": "0",
	}
	for name, v := range want {
		got, ok := res.Files[name]
		if !ok || strings.TrimSpace(string(got)) != v {
			t.Errorf("%s = %q (shipped %v), want %q", name, got, ok, v)
		}
	}
	conf := string(res.Files["installed/60-unwound.conf"])
	for _, line := range []string{"kernel.core_pattern = " + ours, "kernel.core_pipe_limit = 4", "fs.suid_dumpable = 2", "#@previous kernel.core_pattern = " + foreign} {
		if !strings.Contains(conf, "\n"+line+"\n") {
			t.Errorf("60-unwound.conf lacks %q:\n%s", line, conf)
		}
	}
	for _, s := range []string{"another crash handler is installed", "systemd-coredump (/usr/lib/systemd/systemd-coredump)",
		"self-test: unwound a synthetic aarch64 core", "applied to the running kernel", "restored kernel.core_pattern = " + foreign,
		"kernel user helpers: present ([vectors]): GOARM=5/6 builds of unwound would run too"} {
		if !strings.Contains(res.Console, s) {
			t.Errorf("console lacks %q", s)
		}
	}
	if t.Failed() {
		t.Log(res.Console)
	}
}
