package qemu

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/unwound-dev/unwound/testkit/fixture"
)

// guestLibs describes where an architecture's glibc lives on the host and
// what the programs' interpreter is called.
type guestLibs struct {
	hostDir string // the cross sysroot's lib directory
	triplet string
	interp  string
}

var libsFor = map[string]guestLibs{
	"aarch64": {"/usr/aarch64-linux-gnu/lib", "aarch64-linux-gnu", "ld-linux-aarch64.so.1"},
	"arm":     {"/usr/arm-linux-gnueabihf/lib", "arm-linux-gnueabihf", "ld-linux-armhf.so.3"},
	"riscv64": {"/usr/riscv64-linux-gnu/lib", "riscv64-linux-gnu", "ld-linux-riscv64-lp64d.so.1"},
	"x86_64":  {"/lib/x86_64-linux-gnu", "x86_64-linux-gnu", "ld-linux-x86-64.so.2"},
}

var runtimeLibs = []string{"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1"}

// BuildGo cross-compiles a Go command, statically, for a guest, with
// flags added to go build's (e.g. -ldflags).
func BuildGo(pkg, arch, out string, flags ...string) error {
	goarch, goarm := GoArch(arch)
	args := append(append([]string{"build", "-trimpath"}, flags...), "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch, "GOARM="+goarm)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s: %v\n%s", pkg, arch, err, b)
	}
	return nil
}

// AddGlibc puts the architecture's dynamic loader and runtime libraries
// into the guest at /lib, with the multiarch directory and /lib64 pointing
// there, and lays hostRoot out the same way (lib/ holding links to the
// cross sysroot's files), for gdb and offline unwinding of the guest's
// cores.
func AddGlibc(r *Initramfs, arch, hostRoot string) error {
	l, ok := libsFor[arch]
	if !ok {
		return fmt.Errorf("no glibc layout for %s", arch)
	}
	lib := filepath.Join(hostRoot, "lib")
	os.MkdirAll(lib, 0o755)
	os.Symlink(".", filepath.Join(lib, l.triplet))
	os.Symlink("lib", filepath.Join(hostRoot, "lib64"))
	for _, n := range append([]string{l.interp}, runtimeLibs...) {
		p, err := filepath.EvalSymlinks(filepath.Join(l.hostDir, n))
		if err != nil {
			return fmt.Errorf("%s: %v (install the cross toolchain: make deps)", arch, err)
		}
		r.HostFile("/lib/"+n, 0o755, p)
		os.Symlink(p, filepath.Join(lib, n))
	}
	r.Symlink("/lib/"+l.triplet, ".")
	r.Symlink("/lib64", "lib")
	return nil
}

// DebianLibc is Debian's own glibc for a guest architecture
// (libc6:<debarch>; bookworm's, trixie's for riscv64) with the debug files
// that match it (libc6-dbg of the same version), unpacked by
// qemu/libc/get.sh into the cache.
type DebianLibc struct {
	Version string
	Lib     string // the directory holding libc.so.6 and the dynamic loader
	Debug   string // libc6-dbg's usr/lib/debug: a .build-id tree for --debug-dir
}

// FetchDebianLibc fetches (or finds in the cache) Debian's libc6 and
// libc6-dbg for arch. The error says what is missing and why (no network,
// say): the caller can go on with the cross toolchain's libc.
func FetchDebianLibc(arch string) (*DebianLibc, error) {
	l, ok := libsFor[arch]
	if !ok {
		return nil, fmt.Errorf("no glibc layout for %s", arch)
	}
	cmd := exec.Command(filepath.Join(repoRoot(), "qemu", "libc", "get.sh"), arch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("qemu/libc/get.sh %s: %v: %s", arch, err, reason(strings.TrimSpace(stderr.String())))
	}
	dir := strings.TrimSpace(string(out))
	ver, _ := os.ReadFile(filepath.Join(dir, "version"))
	d := &DebianLibc{Version: strings.TrimSpace(string(ver)), Lib: filepath.Join(dir, "root", "lib", l.triplet), Debug: filepath.Join(dir, "debug")}
	if _, err := os.Stat(filepath.Join(d.Lib, "libc.so.6")); err != nil {
		return nil, fmt.Errorf("libc6:%s from Debian: %w", arch, err)
	}
	return d, nil
}

// AddDebianGlibc is AddGlibc with Debian's own libc6 (loader, libc, libm)
// in place of the cross toolchain's build of the same glibc release;
// libgcc_s and libstdc++, which libc6 does not hold, still come from the
// cross toolchain. hostRoot/lib holds the same files, for the symbolizer.
func AddDebianGlibc(r *Initramfs, arch string, d *DebianLibc, hostRoot string) error {
	l, ok := libsFor[arch]
	if !ok {
		return fmt.Errorf("no glibc layout for %s", arch)
	}
	hostLib := filepath.Join(hostRoot, "lib")
	if err := os.MkdirAll(hostLib, 0o755); err != nil {
		return err
	}
	os.Symlink(".", filepath.Join(hostLib, l.triplet))
	os.Symlink("lib", filepath.Join(hostRoot, "lib64"))
	for _, n := range append([]string{l.interp}, runtimeLibs...) {
		from := filepath.Join(d.Lib, n)
		if _, err := os.Stat(from); err != nil {
			from = filepath.Join(l.hostDir, n)
		}
		p, err := filepath.EvalSymlinks(from)
		if err != nil {
			return fmt.Errorf("%s: %v (install the cross toolchain: make deps)", arch, err)
		}
		r.HostFile("/lib/"+n, 0o755, p)
		if err := os.Symlink(p, filepath.Join(hostLib, n)); err != nil {
			return err
		}
	}
	r.Symlink("/lib/"+l.triplet, ".")
	r.Symlink("/lib64", "lib")
	return nil
}

// reason is the line of apt's output that says why it failed: its first
// error (E:), else its last line.
func reason(log string) string {
	lines := strings.Split(log, "\n")
	for _, l := range lines {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "E: ") {
			return l
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// muslLoaders name musl's dynamic loader (its libc.so) per architecture.
var muslLoaders = map[string]string{
	"x86_64":  "ld-musl-x86_64.so.1",
	"aarch64": "ld-musl-aarch64.so.1",
	"arm":     "ld-musl-armhf.so.1",
}

// AddMusl puts musl's dynamic loader into the guest's /lib and hostRoot's,
// after AddGlibc: the host's musl-tools for x86_64, the musl that
// testdata/crash/musl.sh unpacked for the others.
func AddMusl(r *Initramfs, arch, hostRoot string) error {
	name, ok := muslLoaders[arch]
	if !ok {
		return fmt.Errorf("no musl for %s", arch)
	}
	p, err := filepath.EvalSymlinks(filepath.Join(fixture.MuslSysroot(arch), "lib", name))
	if err != nil {
		return fmt.Errorf("musl for %s: %v (musl-tools; testdata/crash/musl.sh)", arch, err)
	}
	r.HostFile("/lib/"+name, 0o755, p)
	os.Symlink(p, filepath.Join(hostRoot, "lib", name))
	return nil
}
