package qemu

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// DebianKernel is one of Debian's packaged kernels (the lab's second
// flavour), unpacked by kernel/debian.sh without installing anything.
type DebianKernel struct {
	Arch    string
	Dir     string // debian.sh's output directory
	Image   string // vmlinuz, as QEMU boots it
	Package string // the .deb it came from
}

// DebianFlavours are the architectures Debian packages a kernel for that
// the lab's machines boot: arm64, armmp (on -M virt) and amd64.
var DebianFlavours = map[string]string{"aarch64": "arm64", "arm": "armmp", "x86_64": "amd64"}

// Debian fetches (or finds in the cache) Debian's kernel for arch.
func Debian(arch string) (*DebianKernel, error) {
	script := filepath.Join(repoRoot(), "qemu", "kernel", "debian.sh")
	dir, err := runScript(exec.Command(script, arch), "debian kernel "+arch)
	if err != nil {
		return nil, err
	}
	pkg, _ := os.ReadFile(filepath.Join(dir, "package"))
	return &DebianKernel{Arch: arch, Dir: dir, Image: filepath.Join(dir, "vmlinuz"), Package: strings.TrimSpace(string(pkg))}, nil
}

// ConsoleModules are the modules the lab needs for its virtio serial port
// when Debian builds them as modules (CONFIG_VIRTIO_CONSOLE=m, and the
// virtio transport on arm64/armmp/amd64): the transport first.
func (k *DebianKernel) ConsoleModules() []string {
	if k.Arch == "x86_64" {
		return []string{"virtio_pci", "virtio_console"}
	}
	return []string{"virtio_mmio", "virtio_console"}
}

// AddModules puts the named modules and everything they depend on (the
// `depends=` of each module's .modinfo; built-in ones need nothing) into
// the initramfs under /lib/modules, and returns their guest paths in load
// order, dependencies first, for guest.Plan.Modules.
func (k *DebianKernel) AddModules(r *Initramfs, names ...string) ([]string, error) {
	byName, err := k.moduleFiles()
	if err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(name string, depth int) error
	visit = func(name string, depth int) error {
		name = strings.ReplaceAll(name, "-", "_")
		if seen[name] {
			return nil
		}
		seen[name] = true
		file, ok := byName[name]
		if !ok {
			if k.builtin(name) {
				return nil
			}
			return fmt.Errorf("debian kernel %s: no module %s", k.Arch, name)
		}
		if depth > 32 {
			return fmt.Errorf("debian kernel %s: module dependencies too deep at %s", k.Arch, name)
		}
		deps, err := moduleDepends(file)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, depth+1); err != nil {
				return err
			}
		}
		gp := "/lib/modules/" + name + ".ko"
		r.HostFile(gp, 0o644, file)
		order = append(order, gp)
		return nil
	}
	for _, n := range names {
		if err := visit(n, 0); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// moduleFiles maps module names to their files through modules.order
// (debian.sh keeps the package's lib/modules/<version> as modules/).
func (k *DebianKernel) moduleFiles() (map[string]string, error) {
	f, err := os.Open(filepath.Join(k.Dir, "modules", "modules.order"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rel := strings.TrimSpace(sc.Text())
		if rel == "" {
			continue
		}
		name := strings.ReplaceAll(strings.TrimSuffix(filepath.Base(rel), ".ko"), "-", "_")
		m[name] = filepath.Join(k.Dir, "modules", rel)
	}
	return m, sc.Err()
}

func (k *DebianKernel) builtin(name string) bool {
	b, err := os.ReadFile(filepath.Join(k.Dir, "modules", "modules.builtin"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.ReplaceAll(strings.TrimSuffix(filepath.Base(l), ".ko"), "-", "_") == name {
			return true
		}
	}
	return false
}

// moduleDepends reads a module's depends= from its .modinfo section.
func moduleDepends(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", file, err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("module %s: no .modinfo", file)
	}
	b, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", file, err)
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}
