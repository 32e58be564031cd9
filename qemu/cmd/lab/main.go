// Command lab runs the core lab from the command line: it boots a real
// kernel under QEMU with unwound-handler as core_pattern, crashes the
// programs of testdata/crash, and collects the reports and full kernel
// cores (every file's checksum verified) into a directory:
//
//	go run ./qemu/cmd/lab --arch arm --scenario sighandler,nullfn --out /tmp/lab-arm
//	go run ./qemu/cmd/lab --arch arm --kernel-arch aarch64 --out /tmp/armhf-on-arm64
//	go run ./qemu/cmd/lab --arch aarch64 --debian --variant O2-dynamic --out /tmp/lab-debian
//
// Output: OUT/cores/VARIANT/PROG-SCENARIO.core, OUT/reports/VARIANT/PROG-SCENARIO.json.zst,
// OUT/root (the guest's files as the host sees them: stripped programs and
// the target's libraries, the --sysroot for gdb and `unwound-handler
// --core-file`), OUT/bin/VARIANT/PROG (unstripped, for gdb) and
// OUT/manifest.json. See docs/qemu-lab.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/qemu"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

func main() {
	arch := flag.String("arch", "aarch64", "the crash programs' architecture: aarch64, arm, riscv64, x86_64")
	karch := flag.String("kernel-arch", "", "the machine and kernel (default --arch; aarch64 with --arch arm runs armhf programs on the arm64 kernel)")
	debian := flag.Bool("debian", false, "boot Debian's packaged kernel (arm64, armmp, amd64) instead of the minimal one")
	variants := flag.String("variant", "", "comma-separated build variants of testdata/crash/build.sh, e.g. O2-dynamic,O0-static-marm-notables (default: the lab's matrix, qemu.DefaultCases)")
	scenarios := flag.String("scenario", "", "comma-separated scenarios of crash.c, throw for crashxx (default: the lab's matrix; all with --variant)")
	series := flag.String("kernel", "", "the minimal kernel's source: empty for linux-source-6.1, 7 for Debian unstable's newest linux-source-7.x")
	mode := flag.String("mode", qemu.ModePipe, "how crashes reach the handler: pipe, pidfd (--pidfd=%F, Linux 6.16+) or socket (@@ and --serve-coredump-socket, 6.17+)")
	out := flag.String("out", "", "output directory (required; emptied first)")
	copyLibs := flag.Bool("copy-sysroot", false, "copy the target libraries into OUT/root/lib instead of linking to the cross sysroot")
	timeout := flag.Duration("timeout", 15*time.Minute, "guest time limit")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "lab: --out is required")
		flag.Usage()
		os.Exit(2)
	}
	if *karch == "" {
		*karch = *arch
	}
	l := &qemu.Lab{KernelArch: *karch, Arch: *arch, Debian: *debian, Series: *series, Mode: *mode, Timeout: *timeout,
		Cases:    qemu.DefaultCases(*arch),
		Progress: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "lab: "+f+"\n", a...) }}
	if *variants != "" || *scenarios != "" {
		l.Cases = qemu.Matrix(list(*variants), list(*scenarios))
	}
	if err := run(l, *out, *copyLibs); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// entry is one crash in manifest.json.
type entry struct {
	Variant  string `json:"variant"`
	Prog     string `json:"prog"`
	Scenario string `json:"scenario"`
	PID      int    `json:"pid"`
	Core     string `json:"core"`
	Report   string `json:"report"`
	Binary   string `json:"binary"`   // unstripped, for gdb
	Stripped string `json:"stripped"` // what the guest ran
	Frames   int    `json:"crashed_thread_frames"`
	Threads  int    `json:"threads"`
}

type manifest struct {
	KernelArch string  `json:"kernel_arch"`
	Arch       string  `json:"arch"`
	Kernel     string  `json:"kernel"`
	Seconds    float64 `json:"boot_to_exit_seconds"`
	Crashes    []entry `json:"crashes"`
}

func run(l *qemu.Lab, out string, copyLibs bool) error {
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	work := filepath.Join(out, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	l.Dir = work
	res, err := l.Run(context.Background())
	if err != nil {
		if res != nil && res.Console != "" {
			os.WriteFile(filepath.Join(out, "console.log"), []byte(res.Console), 0o644)
		}
		return err
	}
	m := manifest{KernelArch: l.KernelArch, Arch: l.Arch, Kernel: res.Kernel, Seconds: res.Duration.Seconds()}
	for _, c := range res.Crashes {
		name := c.Prog + "-" + c.Scenario
		e := entry{Variant: c.Variant, Prog: c.Prog, Scenario: c.Scenario, PID: c.Report.PID,
			Core:     filepath.Join("cores", c.Variant, name+".core"),
			Report:   filepath.Join("reports", c.Variant, name+".json.zst"),
			Binary:   filepath.Join("bin", c.Variant, c.Prog),
			Stripped: filepath.Join("root", "bin", c.Variant, c.Prog),
			Threads:  len(c.Report.Threads)}
		if th := c.Report.Crashed(); th != nil {
			e.Frames = len(th.Frames)
		}
		if c.Core == "" {
			return fmt.Errorf("%s/%s: no core saved", c.Variant, name)
		}
		for src, dst := range map[string]string{c.Core: e.Core, c.ReportFile: e.Report} {
			os.MkdirAll(filepath.Join(out, filepath.Dir(dst)), 0o755)
			if err := os.Rename(src, filepath.Join(out, dst)); err != nil {
				return err
			}
		}
		b := fixture.Binary{Arch: l.Arch, Variant: c.Variant, Prog: c.Prog, Dir: res.Fixtures}
		for src, dst := range map[string]string{b.Unstripped(): e.Binary, b.Stripped(): e.Stripped} {
			if err := copyFile(src, filepath.Join(out, dst)); err != nil {
				return err
			}
		}
		m.Crashes = append(m.Crashes, e)
		fmt.Printf("%-24s %-8s %-12s pid %-5d %2d threads, crashed thread %3d frames  %s\n",
			c.Variant, c.Prog, c.Scenario, e.PID, e.Threads, e.Frames, e.Core)
	}
	// The host mirror of the guest's files: the libraries (linked or
	// copied); the programs were copied above.
	lib := filepath.Join(res.HostRoot, "lib")
	target, err := os.Readlink(lib)
	if err != nil {
		return err
	}
	os.MkdirAll(filepath.Join(out, "root"), 0o755)
	if copyLibs {
		if err := copyLibDir(target, filepath.Join(out, "root", "lib"), res.Crashes); err != nil {
			return err
		}
	} else if err := os.Symlink(target, filepath.Join(out, "root", "lib")); err != nil {
		return err
	}
	os.Symlink("lib", filepath.Join(out, "root", "lib64"))
	js, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "manifest.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	fmt.Printf("%d crashes on %s (%s), boot to exit %.1fs; checksums verified; in %s\n", len(m.Crashes), l.KernelArch, res.Kernel, m.Seconds, out)
	return nil
}

// copyLibDir copies the libraries the cores name (NT_FILE paths under
// /lib) from the cross sysroot.
func copyLibDir(from, to string, crashes []qemu.LabCrash) error {
	os.MkdirAll(to, 0o755)
	seen := map[string]bool{}
	for _, c := range crashes {
		for _, mod := range c.Report.Modules {
			if !strings.HasPrefix(mod.Path, "/lib/") || seen[mod.Path] {
				continue
			}
			seen[mod.Path] = true
			if err := copyFile(filepath.Join(from, strings.TrimPrefix(mod.Path, "/lib/")), filepath.Join(to, strings.TrimPrefix(mod.Path, "/lib/"))); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyFile copies one library whole: they are a few MiB at most.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	os.MkdirAll(filepath.Dir(dst), 0o755)
	return os.WriteFile(dst, b, 0o755)
}
