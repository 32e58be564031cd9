package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/unwound-dev/unwound/internal/fixture"
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

// BuildGo cross-compiles a Go command, statically, for a guest.
func BuildGo(pkg, arch, out string) error {
	goarch, goarm := GoArch(arch)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
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
