// Package labcore makes real kernel cores of the fixture programs: a
// minimal kernel boots under QEMU, runs them, and ships the cores out.
// The cores are cached beside the fixtures, so tests that need the same
// crashes share one boot. Tests only.
package labcore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/qemu"
	"github.com/unwound-dev/unwound/qemu/guest"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// Crash names one crash of a fixture program.
type Crash struct{ Variant, Prog, Scenario string }

// Name is the crash's name: VARIANT-PROG-SCENARIO.
func (c Crash) Name() string { return c.Variant + "-" + c.Prog + "-" + c.Scenario }

// Cores returns real kernel cores of the given crashes for arch: its
// minimal kernel boots under QEMU once, with a core_pattern that writes
// files, runs each stripped program, and ships the cores out. qemu-user
// writes no cores for riscv64, so this is where that architecture's cores
// come from. The cores are cached beside the fixtures, keyed by the
// kernel. hostRoot mirrors the guest's files (programs at
// /bin/VARIANT/PROG, glibc at /lib) for the handler, gdb and the
// symbolizer.
func Cores(t testing.TB, arch, fx string, crashes []Crash) (cores map[string]string, hostRoot string) {
	t.Helper()
	kernel, err := qemu.Kernel(arch)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(fx), "labcores", filepath.Base(filepath.Dir(kernel)))
	unlock, err := fixture.LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	hostRoot = t.TempDir()
	r := qemu.NewInitramfs()
	if err := qemu.AddGlibc(r, arch, hostRoot); err != nil {
		t.Skip(err)
	}
	cores = map[string]string{}
	plan := guest.Plan{Steps: []guest.Step{{Mkdir: "/var/cores"}}}
	added := map[string]bool{}
	for _, c := range crashes {
		b := fixture.Binary{Arch: arch, Variant: c.Variant, Prog: c.Prog, Dir: fx}
		gp := "/bin/" + c.Variant + "/" + c.Prog
		if !added[gp] {
			added[gp] = true
			r.HostFile(gp, 0o755, b.Stripped())
			os.MkdirAll(filepath.Join(hostRoot, "bin", c.Variant), 0o755)
			os.Symlink(b.Stripped(), filepath.Join(hostRoot, "bin", c.Variant, c.Prog))
		}
		cores[c.Name()] = filepath.Join(dir, c.Name()+".core")
		plan.Steps = append(plan.Steps,
			// One pattern per crash, so each core says which crash it is.
			guest.Step{Write: "/proc/sys/kernel/core_pattern", Data: "/var/cores/" + c.Name() + ".core"},
			guest.Step{Run: []string{gp, c.Scenario}},
			guest.Step{WaitFiles: "/var/cores/" + c.Name() + ".core"})
	}
	missing := false
	for _, p := range cores {
		if _, err := os.Stat(p); err != nil {
			missing = true
		}
	}
	if !missing {
		return cores, hostRoot
	}

	plan.Steps = append(plan.Steps, guest.Step{Ship: "/var/cores/*", As: "cores"})
	res := boot(t, &qemu.Machine{Arch: arch, Kernel: kernel, Initramfs: r, Memory: "512M", Timeout: 10 * time.Minute}, plan)
	t.Logf("%s lab: %d crashes, boot to poweroff %v", arch, len(crashes), res.Duration.Round(time.Millisecond))
	for _, c := range crashes {
		data, ok := res.Files["cores/"+c.Name()+".core"]
		if !ok {
			t.Fatalf("%s: the guest wrote no core\n%s", c.Name(), res.Console)
		}
		keep(t, cores[c.Name()], data)
	}
	return cores, hostRoot
}

// boot runs plan in m's guest, with guestinit as /init and the plan as
// /plan.json in its initramfs, and returns what the guest shipped.
func boot(t testing.TB, m *qemu.Machine, plan guest.Plan) *qemu.Result {
	t.Helper()
	js, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	m.Initramfs.File("/plan.json", 0o644, js)
	m.Dir = t.TempDir()
	init := filepath.Join(m.Dir, "init")
	if err := qemu.BuildGo("github.com/unwound-dev/unwound/qemu/cmd/guestinit", m.Arch, init); err != nil {
		t.Fatal(err)
	}
	m.Initramfs.HostFile("/init", 0o755, init)
	res, err := m.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// keep writes a shipped core to path, through a temporary file: a
// reader never sees half of it.
func keep(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
