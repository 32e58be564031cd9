package qemu

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SystemdGuest is a boot of Debian unstable's systemd on Debian
// unstable's arm64 kernel, fetched by qemu/systemd/get.sh: the board that
// issue 28 worries about, where systemd-coredump-register.service writes
// its own @@ line into core_pattern at boot (systemd 262, Linux 6.19+).
type SystemdGuest struct {
	Dir      string // get.sh's directory
	Kernel   string // vmlinuz
	Root     string // the unpacked packages
	Versions string // "systemd VERSION\nkernel PACKAGE VERSION"
}

// FetchSystemdGuest runs qemu/systemd/get.sh (cached: offline after the
// first run).
func FetchSystemdGuest() (*SystemdGuest, error) {
	cmd := exec.Command("sh", filepath.Join(repoRoot(), "qemu/systemd/get.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("qemu/systemd/get.sh: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	v, err := os.ReadFile(filepath.Join(dir, "versions"))
	if err != nil {
		return nil, err
	}
	return &SystemdGuest{Dir: dir, Kernel: filepath.Join(dir, "vmlinuz"), Root: filepath.Join(dir, "root"),
		Versions: strings.TrimSpace(string(v))}, nil
}

// busyboxApplets are the commands the lab's units and report.sh run that
// the systemd packages do not bring (busybox-static does, as one binary).
var busyboxApplets = []string{"sh", "cat", "echo", "ls", "sleep", "wc", "sed", "grep", "head", "tail",
	"dmesg", "basename", "uname", "find", "cut", "tr"}

// SystemdRootOptions says what goes into the guest besides the packages.
type SystemdRootOptions struct {
	// Installed is a `make install DESTDIR=` tree (INIT=systemd) to add,
	// with unwound-coredump.socket enabled as `systemctl enable` would.
	// Empty: unwound is not installed at all.
	Installed string
	Crash     string // the static crashing program
}

// Initramfs packs the guest's root: the packages, /init as systemd,
// systemd-coredumpd.service enabled (Debian's 90-systemd.preset enables
// it; the preset applies on a first boot or `systemctl preset-all`, here
// the link is made directly so the result does not hang on first-boot
// detection), the lab's crash and report units, and unwound if given.
func (g *SystemdGuest) Initramfs(o SystemdRootOptions) (*Initramfs, error) {
	r := NewInitramfs()
	if err := r.HostTree(g.Root, "/"); err != nil {
		return nil, err
	}
	if o.Installed != "" {
		if err := r.HostTree(o.Installed, "/"); err != nil {
			return nil, err
		}
	}
	// The kernel runs /init from the initramfs (rdinit=/init): systemd
	// itself, as PID 1 of a normal boot (no /etc/initrd-release).
	r.Symlink("/init", "/usr/lib/systemd/systemd")
	for _, a := range busyboxApplets {
		p := "/usr/bin/" + a
		if _, err := os.Lstat(filepath.Join(g.Root, p)); err == nil {
			continue
		}
		r.Symlink(p, "busybox")
	}
	// base-files is not in the closure: what systemd reads of it.
	r.File("/usr/lib/os-release", 0o644, []byte("PRETTY_NAME=\"unwound lab (Debian unstable packages)\"\nNAME=Debian\nID=debian\n"))
	r.Symlink("/etc/os-release", "../usr/lib/os-release")
	// Not a first boot: a fixed machine id, so neither systemd-firstboot
	// (which would ask for a timezone on the console) nor the first-boot
	// preset-all runs, and what is enabled is what the links below say.
	r.File("/etc/machine-id", 0o444, []byte("2f1e0c5a9b8d4e7f8a6b5c4d3e2f1a0b\n"))
	// What this guest lacks and a board would have: udev (no device unit
	// ever appears, so a getty on ttyAMA0 would wait 90 s for its tty) and
	// D-Bus (for logind); ldconfig has no binary here. Masked as a board
	// masks what it does not ship.
	for _, u := range []string{"systemd-logind.service", "ldconfig.service", "getty.target"} {
		r.Symlink("/etc/systemd/system/"+u, "/dev/null")
	}
	r.Dir("/var/lib")
	r.Dir("/tmp")
	r.entries["tmp"] = entry{mode: modeDir | 0o1777}

	lab := filepath.Join(repoRoot(), "qemu/systemd")
	const units = "/etc/systemd/system"
	for _, u := range []string{"unwound-lab-crash.service", "unwound-lab-report.service"} {
		r.HostFile(units+"/"+u, 0o644, filepath.Join(lab, u))
		r.Symlink(units+"/multi-user.target.wants/"+u, "../"+u)
	}
	r.HostFile("/usr/local/lib/unwound-lab/report.sh", 0o755, filepath.Join(lab, "report.sh"))
	r.HostFile("/usr/local/bin/unwound-lab-crash", 0o755, o.Crash)
	r.Symlink(units+"/sysinit.target.wants/systemd-coredumpd.service", "/usr/lib/systemd/system/systemd-coredumpd.service")
	if o.Installed != "" {
		sock := "/usr/lib/systemd/system/unwound-coredump.socket"
		if _, err := os.Stat(filepath.Join(o.Installed, sock)); err != nil {
			return nil, fmt.Errorf("make install put no %s: %v", sock, err)
		}
		r.Symlink(units+"/sockets.target.wants/unwound-coredump.socket", sock)
	}
	return r, nil
}

// SystemdReport is what report.sh printed.
type SystemdReport struct {
	Values map[string]string            // key=value lines
	Units  map[string]map[string]string // "unit NAME k=v ..." lines
	Queue  []string                     // "queue FILE SIZE" lines
}

// ParseSystemdReport reads the "unwound-systemd:" lines of a console log.
func ParseSystemdReport(console string) *SystemdReport {
	rep := &SystemdReport{Values: map[string]string{}, Units: map[string]map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(console))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		i := strings.Index(l, "unwound-systemd: ")
		if i < 0 {
			continue
		}
		l = l[i+len("unwound-systemd: "):]
		switch {
		case strings.HasPrefix(l, "unit "):
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			m := map[string]string{}
			for _, kv := range f[2:] {
				if k, v, ok := strings.Cut(kv, "="); ok {
					m[k] = v
				}
			}
			rep.Units[f[1]] = m
		case strings.HasPrefix(l, "queue "):
			rep.Queue = append(rep.Queue, strings.TrimPrefix(l, "queue "))
		default:
			if k, v, ok := strings.Cut(l, "="); ok {
				rep.Values[k] = v
			}
		}
	}
	return rep
}
