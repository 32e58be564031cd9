package qemu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/qemu/guest"
)

// Arches the lab boots.
var Arches = []string{"aarch64", "arm", "riscv64", "x86_64"}

// GoArch returns GOARCH and GOARM for a guest architecture.
func GoArch(arch string) (goarch, goarm string) {
	switch arch {
	case "aarch64":
		return "arm64", ""
	case "arm":
		return "arm", "7"
	case "riscv64":
		return "riscv64", ""
	}
	return "amd64", ""
}

// Kernel builds (or finds in the cache) the minimal kernel for arch and
// returns its image path.
func Kernel(arch string) (string, error) { return KernelSeries(arch, "") }

// KernelSeries is Kernel from another source: "" is the host's
// linux-source-6.1, "7" the newest linux-source-7.x of Debian's unstable
// suite (kernel/build.sh with UNWOUND_KERNEL=7; the first call fetches
// about 160 MB into the cache).
func KernelSeries(arch, series string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "kernel", "build.sh")
	cmd := exec.Command(script, arch)
	cmd.Env = os.Environ()
	if series != "" {
		cmd.Env = append(cmd.Env, "UNWOUND_KERNEL="+series)
	}
	return runScript(cmd, "kernel "+arch)
}

// runScript runs one of the scripts that fetch or build what the lab
// boots (kernel/build.sh, kernel/debian.sh, busybox/get.sh) and returns
// the path it prints. Its error names what was asked for and holds the
// script's stderr.
func runScript(cmd *exec.Cmd, what string) (string, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", what, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// Machine is one guest boot.
type Machine struct {
	Arch      string
	Kernel    string     // image path
	Initramfs *Initramfs // must contain /init
	CPU       string     // default per arch (cortex-a53, cortex-a15)
	Memory    string     // default 256M
	Append    string     // extra kernel command line
	Timeout   time.Duration
	Dir       string // work directory (console log, shipped stream); a temp dir when empty
	// Link, when set, adds a virtio console (/dev/hvc0 in the guest, a tty)
	// backed by a host pty, and calls Link with the pty's path once QEMU
	// has made it: the serial line the uploader talks over.
	Link func(ptyPath string)
	// Disks are raw images attached as virtio block devices, in order
	// (/dev/vda, /dev/vdb, …), with cache=directsync: a write the guest
	// saw complete is in the image file, so killing QEMU (SIGKILL) is a
	// power cut for the guest, and the next boot of the same image sees
	// what a board would see.
	Disks []string
	// Flash is a raw image of exactly 64 MiB for the second CFI flash bank
	// of -M virt (pflash unit 1; aarch64 only). The machine then runs with
	// secure=on: bank 0 (unit 0) becomes the secure world's and leaves the
	// device tree, so Linux sees bank 1 alone as mtd0. Without secure=on
	// both banks form one 128 MiB MTD whose first half has no backing file
	// (and a drive on unit 0 would be taken as firmware, which loads the
	// kernel instead of -kernel). Images start erased (0xff).
	Flash string
	// DTB replaces the machine's generated device tree (-dtb); QEMU still
	// fills in /chosen (command line, initrd) and the memory node. Used to
	// give the flash a partition table (UBI refuses a raw CFI chip).
	DTB string

	// LinkUART puts the Link on the machine's second UART (/dev/ttyS1 on
	// x86's -M pc) instead of a virtio console: what a board's spare UART is.
	LinkUART bool

	// A user's own system (docs/qemu-lab.md): BaseInitrd is a cpio
	// archive (compressed or not: a Buildroot rootfs.cpio(.gz), a Yocto
	// .cpio.gz) that Initramfs is appended to; the kernel unpacks both,
	// the later files winning. MachineType replaces -M, Console the
	// kernel's console device; Extra is appended to QEMU's arguments.
	BaseInitrd  string
	MachineType string
	Console     string
	Extra       []string
}

// Result is what a boot produced.
type Result struct {
	Console  string
	Files    map[string][]byte // shipped by the guest, checksums verified
	Duration time.Duration
	// Done is true when the guest printed the end marker with rc=0.
	Done bool
}

// Run boots the machine and waits for it to power off or time out. QEMU
// exits 0 on a guest panic too: Done is judged by the marker line.
func (m *Machine) Run(ctx context.Context) (*Result, error) {
	dir := m.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "unwound-qemu-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	f, err := os.Create(initrd)
	if err != nil {
		return nil, err
	}
	if err := copyBase(f, m.BaseInitrd); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := m.Initramfs.WriteTo(f); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	console, ship := filepath.Join(dir, "console.log"), filepath.Join(dir, "ship.bin")
	os.Remove(console)
	os.Remove(ship)
	args, err := m.args(initrd, console, ship)
	if err != nil {
		return nil, err
	}
	timeout := m.Timeout
	if timeout == 0 {
		timeout = 120 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	if m.Link != nil && m.LinkUART {
		args = append(args, "-chardev", "pty,id=link", "-serial", "chardev:link")
	} else if m.Link != nil {
		args = append(args, "-chardev", "pty,id=link", "-device", "virtconsole,chardev=link")
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	var qout bytes.Buffer
	cmd.Stderr = &qout
	var runErr error
	if m.Link != nil {
		// QEMU says "char device redirected to /dev/pts/N (label link)" on
		// its standard output.
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdout = pw
		if err := cmd.Start(); err != nil {
			pw.Close()
			pr.Close()
			return nil, err
		}
		pw.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer pr.Close()
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				l := sc.Text()
				qout.WriteString(l + "\n")
				if i := strings.Index(l, "redirected to "); i >= 0 && strings.Contains(l, "label link") {
					m.Link(strings.Fields(l[i+len("redirected to "):])[0])
				}
			}
		}()
		runErr = cmd.Wait()
		<-done
	} else {
		cmd.Stdout = &qout
		runErr = cmd.Run()
	}
	res := &Result{Duration: time.Since(start)}
	con, _ := os.ReadFile(console)
	res.Console = string(con)
	res.Done = strings.Contains(res.Console, guest.Marker+" rc=0")
	if sb, err := os.ReadFile(ship); err == nil {
		files, perr := guest.ReadFiles(bytes.NewReader(sb))
		res.Files = files
		if perr != nil && err == nil {
			err = perr
		}
		if perr != nil {
			return res, perr
		}
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("qemu %s: timed out after %v; console tail:\n%s", m.Arch, timeout, tail(res.Console, 2000))
	}
	if runErr != nil {
		return res, fmt.Errorf("qemu %s: %v\n%s", m.Arch, runErr, qout.String())
	}
	if !res.Done {
		return res, errors.New("guest did not finish its plan; console tail:\n" + tail(res.Console, 3000))
	}
	return res, nil
}

// copyBase copies a user's cpio archive into the initrd and pads it to a
// multiple of 4 bytes with zeros: the kernel skips zeros between archives,
// and a newc header must start 4-byte aligned.
func copyBase(w io.Writer, base string) error {
	if base == "" {
		return nil
	}
	f, err := os.Open(base)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return fmt.Errorf("initrd %s: %w", base, err)
	}
	_, err = w.Write(make([]byte, (4-n%4)%4+512))
	return err
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// machineFacts are the QEMU facts per architecture (DESIGN §9).
type machineFacts struct {
	binary    string
	machine   []string // -M and firmware
	cpu       string   // default -cpu, "" for QEMU's
	console   string   // the kernel's console device
	serialBus string   // the virtio-serial device for this machine
}

var machines = map[string]machineFacts{
	"aarch64": {"qemu-system-aarch64", []string{"-M", "virt"}, "cortex-a53", "ttyAMA0", "virtio-serial-device"},
	"arm":     {"qemu-system-arm", []string{"-M", "virt,highmem=off"}, "cortex-a15", "ttyAMA0", "virtio-serial-device"},
	"riscv64": {"qemu-system-riscv64", []string{"-M", "virt", "-bios", "default"}, "", "ttyS0", "virtio-serial-device"},
	"x86_64":  {"qemu-system-x86_64", []string{"-M", "pc"}, "", "ttyS0", "virtio-serial-pci"},
}

func (m *Machine) args(initrd, console, ship string) ([]string, error) {
	mem := m.Memory
	if mem == "" {
		mem = "256M"
	}
	common := []string{"-display", "none", "-monitor", "none", "-no-reboot", "-nic", "none",
		"-smp", "1", "-m", mem, "-kernel", m.Kernel, "-initrd", initrd,
		"-serial", "file:" + console,
		"-chardev", "file,id=ship,path=" + ship}
	g, ok := machines[m.Arch]
	if !ok {
		return nil, fmt.Errorf("qemu: unknown arch %q", m.Arch)
	}
	machine := g.machine
	if m.MachineType != "" {
		machine = []string{"-M", m.MachineType}
	}
	con := g.console
	if m.Console != "" {
		con = m.Console
	}
	a := append([]string{g.binary}, machine...)
	cpu := m.CPU
	if cpu == "" {
		cpu = g.cpu
	}
	if cpu != "" {
		a = append(a, "-cpu", cpu)
	}
	a = append(a, common...)
	if m.Flash != "" {
		if m.Arch != "aarch64" {
			return nil, fmt.Errorf("qemu: Flash is for aarch64 -M virt only, not %s", m.Arch)
		}
		a[2] += ",secure=on" // "-M", "virt"
		a = append(a, "-drive", "if=pflash,unit=1,format=raw,file="+m.Flash)
	}
	if m.DTB != "" {
		a = append(a, "-dtb", m.DTB)
	}
	for i, d := range m.Disks {
		// virtio-blk-device on the virt machines' MMIO bus, virtio-blk-pci on x86.
		dev := strings.Replace(g.serialBus, "virtio-serial", "virtio-blk", 1)
		id := fmt.Sprintf("disk%d", i)
		a = append(a, "-drive", "file="+d+",if=none,format=raw,cache=directsync,id="+id, "-device", dev+",drive="+id)
	}
	a = append(a, "-device", g.serialBus, "-device", "virtserialport,chardev=ship,name=unwound.ship",
		"-append", "console="+con+" panic=-1 rdinit=/init quiet loglevel=4 "+m.Append)
	a = append(a, m.Extra...)
	if _, err := exec.LookPath(a[0]); err != nil {
		return nil, fmt.Errorf("%s not installed (make deps)", a[0])
	}
	return a, nil
}
