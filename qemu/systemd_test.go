package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSystemdCorePattern boots Debian unstable's systemd (262) on Debian
// unstable's arm64 kernel (7.x) with unwound installed as `make install
// INIT=systemd CORE_PATTERN_SOCKET=@@` installs it and its socket enabled,
// next to systemd-coredump with systemd-coredump-register.service enabled
// as Debian's preset enables it (issue 28, "systemd 262"). After the boot
// core_pattern must be unwound's line, the register service must have
// run and finished before unwound's socket wrote it, and a crash must
// land in unwound's queue and not in systemd-coredump. A second boot
// without unwound shows that the register service does take
// core_pattern, so the first result means something.
//
// Opt-in (UNWOUND_LAB_SYSTEMD=1): it downloads ~27 MB of Debian packages
// once (qemu/systemd/get.sh, cached in ~/.cache/unwound/systemd-guest)
// and boots two guests under TCG.
func TestSystemdCorePattern(t *testing.T) {
	if testing.Short() || os.Getenv("UNWOUND_LAB_SYSTEMD") == "" {
		t.Skip("opt-in: UNWOUND_LAB_SYSTEMD=1 (boots Debian unstable's systemd 262 on aarch64)")
	}
	if _, err := exec.LookPath("aarch64-linux-gnu-gcc"); err != nil {
		t.Skip("aarch64-linux-gnu-gcc not installed (make deps)")
	}
	g, err := FetchSystemdGuest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest: %s", strings.ReplaceAll(g.Versions, "\n", "; "))
	work := t.TempDir()
	crash := filepath.Join(work, "unwound-lab-crash")
	crossCompile(t, "aarch64", "-static", "-O0", "-o", crash, filepath.Join(repoRoot(), "qemu/systemd/crash.c"))

	inst := filepath.Join(work, "install")
	if out, err := MakeInstall("aarch64", inst, "INIT=systemd", "CORE_PATTERN_SOCKET=@@"); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	// The root is an initramfs (tmpfs): the queue must be allowed there,
	// as a board's rootfs overlay would say for a volatile queue.
	cfg := filepath.Join(inst, "etc/unwound/unwound.toml")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = SetTOML(b, "queue", "allow_volatile", "true"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		t.Fatal(err)
	}

	boot := func(t *testing.T, installed string) (*SystemdReport, *Result) {
		r, err := g.Initramfs(SystemdRootOptions{Installed: installed, Crash: crash})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if d := os.Getenv("UNWOUND_LAB_KEEP"); d != "" {
			// The console log (console.log) stays for a look.
			dir = filepath.Join(d, "systemd-"+filepath.Base(t.Name()))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		m := &Machine{Arch: "aarch64", Kernel: g.Kernel, Initramfs: r, Memory: "1G", CPU: "cortex-a57",
			Timeout: 5 * time.Minute, Dir: dir,
			// systemd's own status lines, which quiet would hide: the
			// console is all a failed boot leaves.
			Append: "systemd.show_status=1 systemd.firstboot=off systemd.getty_auto=0"}
		res, err := m.Run(context.Background())
		if res != nil {
			t.Logf("boot took %v", res.Duration.Round(time.Second))
		}
		if err != nil {
			if res != nil {
				t.Logf("console:\n%s", tail(res.Console, 20000))
			}
			t.Fatal(err)
		}
		rep := ParseSystemdReport(res.Console)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("console:\n%s", tail(res.Console, 20000))
			}
		})
		if i := strings.Index(res.Console, "--- journal"); i >= 0 {
			j := strings.Index(res.Console[i:], "--- end")
			if j < 0 {
				j = len(res.Console) - i
			}
			t.Logf("guest's journal and kernel log:\n%s", res.Console[i:i+j])
		}
		for _, l := range strings.Split(res.Console, "\n") {
			if strings.Contains(l, "unwound-systemd: ") {
				t.Log(strings.TrimSpace(l))
			}
		}
		return rep, res
	}
	unit := func(t *testing.T, rep *SystemdReport, name string) map[string]string {
		u, ok := rep.Units[name]
		if !ok {
			t.Fatalf("no report for %s", name)
		}
		return u
	}
	usec := func(t *testing.T, u map[string]string, k string) int64 {
		n, err := strconv.ParseInt(u[k], 10, 64)
		if err != nil || n == 0 {
			t.Fatalf("%s=%q: not a timestamp", k, u[k])
		}
		return n
	}
	const systemdPattern = "@@/run/systemd/coredumpd/kernel"

	t.Run("unwound", func(t *testing.T) {
		rep, res := boot(t, inst)
		if want := "@@/run/unwound/coredump.sock"; rep.Values["core_pattern"] != want {
			t.Errorf("core_pattern after boot = %q, want unwound's %q", rep.Values["core_pattern"], want)
		}
		reg := unit(t, rep, "systemd-coredump-register.service")
		if reg["active"] != "active" || reg["result"] != "success" || reg["exit"] != "0" {
			t.Errorf("systemd-coredump-register.service did not run: %v", reg)
		}
		sock := unit(t, rep, "unwound-coredump.socket")
		if sock["active"] != "active" {
			t.Errorf("unwound-coredump.socket: %v", sock)
		}
		// The register service's ExecStart had exited before unwound's
		// socket started (its ExecStartPost writes unwound's line).
		regDone, sockStart := usec(t, reg, "main_exit_us"), usec(t, sock, "start_us")
		if regDone >= sockStart {
			t.Errorf("register service exited at %dus, unwound's socket started at %dus: not ordered after it", regDone, sockStart)
		}
		t.Logf("register exited at %.3fs, unwound socket started at %.3fs, active at %.3fs",
			float64(regDone)/1e6, float64(sockStart)/1e6, float64(usec(t, sock, "active_us"))/1e6)
		// Ordered twice over: by the unit's own After= and, as a socket
		// with default dependencies, after sysinit.target, which the
		// register service is Before=.
		after := "," + rep.Values["socket_after"] + ","
		for _, u := range []string{"systemd-coredump-register.service", "systemd-sysctl.service", "sysinit.target"} {
			if !strings.Contains(after, ","+u+",") {
				t.Errorf("unwound-coredump.socket is not After=%s: After=%s", u, rep.Values["socket_after"])
			}
		}
		if srv := unit(t, rep, "unwound-coredump.service"); srv["active"] != "active" {
			t.Errorf("unwound-coredump.service after the crash: %v (socket activation)", srv)
		}
		if !strings.Contains(res.Console, "unwound-systemd: crash status=139") {
			t.Errorf("the crash program did not die of SIGSEGV with a core (status 139)")
		}
		if rep.Values["queue_count"] != "1" || len(rep.Queue) != 1 {
			t.Errorf("unwound's queue holds %q reports, want 1: %q", rep.Values["queue_count"], rep.Queue)
		} else if name := strings.Fields(rep.Queue[0])[0]; !strings.Contains(res.Console, "SIGSEGV: report "+name) {
			t.Errorf("the server's log does not name %s as the crash's report", name)
		}
		if n := rep.Values["systemd_coredump_files"]; n != "0" {
			t.Errorf("/var/lib/systemd/coredump holds %s files, want 0", n)
		}
		if n := rep.Values["journal_dumped_core"]; n != "0" {
			t.Errorf("the journal has %s 'dumped core' lines (systemd-coredump took the crash), want 0", n)
		}
	})
	t.Run("without-unwound", func(t *testing.T) {
		rep, res := boot(t, "")
		if rep.Values["core_pattern"] != systemdPattern {
			t.Errorf("core_pattern after boot = %q, want systemd-coredump-register's %q", rep.Values["core_pattern"], systemdPattern)
		}
		if reg := unit(t, rep, "systemd-coredump-register.service"); reg["result"] != "success" || reg["exit"] != "0" {
			t.Errorf("systemd-coredump-register.service: %v", reg)
		}
		if n := rep.Values["journal_dumped_core"]; n == "0" || n == "" {
			t.Errorf("systemd-coredump did not take the crash (journal 'dumped core' lines: %q)\n%s", n, tail(res.Console, 4000))
		}
	})
}

func TestParseSystemdReport(t *testing.T) {
	rep := ParseSystemdReport("[  3.1] noise\r\nunwound-systemd: core_pattern=@@/run/unwound/coredump.sock\r\n" +
		"unwound-systemd: unit a.service load=loaded active=active result=success exit=0 start_us=12\n" +
		"x unwound-systemd: queue 1700-1.json.zst 812\nunwound-systemd: queue_count=1\n")
	if got := rep.Values["core_pattern"]; got != "@@/run/unwound/coredump.sock" {
		t.Errorf("core_pattern = %q", got)
	}
	if got := rep.Units["a.service"]["start_us"]; got != "12" {
		t.Errorf("start_us = %q", got)
	}
	if len(rep.Queue) != 1 || rep.Queue[0] != "1700-1.json.zst 812" || rep.Values["queue_count"] != "1" {
		t.Errorf("queue = %q, count %q", rep.Queue, rep.Values["queue_count"])
	}
}
