package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// there, and lays hostRoot out the same way (lib -> the cross sysroot), for
// gdb and offline unwinding of the guest's cores.
func AddGlibc(r *Initramfs, arch, hostRoot string) error {
	l, ok := libsFor[arch]
	if !ok {
		return fmt.Errorf("no glibc layout for %s", arch)
	}
	os.MkdirAll(hostRoot, 0o755)
	os.Symlink(l.hostDir, filepath.Join(hostRoot, "lib"))
	os.Symlink("lib", filepath.Join(hostRoot, "lib64"))
	for _, n := range append([]string{l.interp}, runtimeLibs...) {
		p, err := filepath.EvalSymlinks(filepath.Join(l.hostDir, n))
		if err != nil {
			return fmt.Errorf("%s: %v (install the cross toolchain: make deps)", arch, err)
		}
		r.HostFile("/lib/"+n, 0o755, p)
	}
	r.Symlink("/lib/"+l.triplet, ".")
	r.Symlink("/lib64", "lib")
	return nil
}
