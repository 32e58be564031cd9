// Command guestinit is PID 1 of the core lab's QEMU guests: it mounts the
// kernel filesystems, runs /plan.json (set core_pattern, crash programs,
// wait for the handler, ship files to the host over a virtio serial port),
// prints the end marker and reboots, which ends QEMU (-no-reboot).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/unwound-dev/unwound/qemu/guest"
	"golang.org/x/sys/unix"
)

func main() {
	rc := run()
	fmt.Printf("%s rc=%d\n", guest.Marker, rc)
	syscall.Sync()
	// QEMU runs with -no-reboot, so a reboot ends it on every machine;
	// power-off needs ACPI on x86, which the minimal kernel leaves out.
	syscall.Reboot(syscall.LINUX_REBOOT_CMD_RESTART)
	for {
		time.Sleep(time.Second)
	}
}

func run() int {
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"}, {"tmpfs", "/run", "tmpfs"},
	} {
		os.MkdirAll(m.dst, 0o755)
		if err := syscall.Mount(m.src, m.dst, m.fs, 0, ""); err != nil && err != syscall.EBUSY {
			fmt.Printf("guestinit: mount %s: %v\n", m.dst, err)
		}
	}
	inf := &syscall.Rlimit{Cur: ^uint64(0), Max: ^uint64(0)}
	syscall.Setrlimit(4 /* RLIMIT_CORE */, inf)

	b, err := os.ReadFile("/plan.json")
	if err != nil {
		fmt.Println("guestinit:", err)
		return 1
	}
	var plan guest.Plan
	if err := json.Unmarshal(b, &plan); err != nil {
		fmt.Println("guestinit: plan:", err)
		return 1
	}
	for _, m := range plan.Modules {
		if err := loadModule(m); err != nil {
			fmt.Printf("guestinit: %v\n", err)
			return 1
		}
	}
	port := openPort()
	if port != nil {
		defer port.Close()
	}
	for i, s := range plan.Steps {
		if err := step(s, port); err != nil {
			fmt.Printf("guestinit: step %d: %v\n", i, err)
			return 1
		}
	}
	return 0
}

// loadModule inserts a kernel module with finit_module(2).
func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && err != unix.EEXIST {
		return fmt.Errorf("finit_module %s: %w", path, err)
	}
	return nil
}

// openPort finds the virtio serial port the host collects files from. The
// descriptor is close-on-exec: a virtio port has one opener at a time, and
// crashing children must not hold it.
//
// Right after the module is loaded, devtmpfs can show the port's node
// before the driver has added the port: open then fails with ENXIO (seen
// with Debian's arm64 kernel under load), and is tried again.
func openPort() *os.File {
	var err error
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ports, _ := filepath.Glob("/dev/vport*p1")
		if len(ports) == 0 {
			continue
		}
		var f *os.File
		if f, err = os.OpenFile(ports[0], os.O_WRONLY|syscall.O_CLOEXEC, 0); err == nil {
			return f
		}
		if !errors.Is(err, syscall.ENXIO) {
			break
		}
	}
	if err != nil {
		fmt.Println("guestinit:", err)
		return nil
	}
	fmt.Println("guestinit: no virtio serial port: files cannot be shipped")
	return nil
}

func step(s guest.Step, port *os.File) error {
	switch {
	case s.Mkdir != "":
		return os.MkdirAll(s.Mkdir, 0o700)
	case s.Mount != "":
		os.MkdirAll(s.Mount, 0o755)
		return syscall.Mount(s.FSType, s.Mount, s.FSType, 0, "")
	case s.Write != "":
		return os.WriteFile(s.Write, []byte(s.Data), 0o644)
	case len(s.CorePattern) > 0:
		out, err := exec.Command(s.CorePattern[0], s.CorePattern[1:]...).Output()
		if err != nil {
			return fmt.Errorf("%v: %w", s.CorePattern, err)
		}
		fmt.Printf("guestinit: core_pattern %s", out)
		return os.WriteFile("/proc/sys/kernel/core_pattern", out, 0o644)
	case len(s.Start) > 0:
		cmd := exec.Command(s.Start[0], s.Start[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/bin:/usr/bin"}
		if err := cmd.Start(); err != nil {
			return err
		}
		fmt.Printf("guestinit: started %s (pid %d)\n", strings.Join(s.Start, " "), cmd.Process.Pid)
		go func() { // a server that ends early says so on the console
			err := cmd.Wait()
			fmt.Printf("guestinit: %s ended: %v %v\n", s.Start[0], cmd.ProcessState, err)
		}()
		return nil
	case len(s.Run) > 0:
		cmd := exec.Command(s.Run[0], s.Run[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		cmd.Dir = "/tmp"
		cmd.Env = []string{"PATH=/bin:/usr/bin"}
		err := cmd.Run()
		fmt.Printf("guestinit: %s: %v\n", strings.Join(s.Run, " "), cmd.ProcessState)
		if s.MustSucceed && err != nil {
			return err
		}
		return nil
	case s.WaitFiles != "":
		n := s.Count
		if n == 0 {
			n = 1
		}
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if m, _ := filepath.Glob(s.WaitFiles); len(m) >= n {
				time.Sleep(50 * time.Millisecond) // a rename is the last step; let writers close
				return nil
			}
		}
		return fmt.Errorf("timed out waiting for %d files like %s", n, s.WaitFiles)
	case s.Ship != "":
		if port == nil {
			return fmt.Errorf("no port to ship %s", s.Ship)
		}
		files, _ := filepath.Glob(s.Ship)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			name := strings.TrimPrefix(f, "/")
			if s.As != "" {
				name = s.As + "/" + filepath.Base(f)
			}
			if err := guest.WriteFile(port, name, data); err != nil {
				return err
			}
			if s.Remove {
				if err := os.Remove(f); err != nil {
					return err
				}
			}
		}
		return nil // a virtio port has no fsync; writes are done when write returns
	}
	return fmt.Errorf("empty step")
}
