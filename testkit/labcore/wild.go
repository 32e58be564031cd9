package labcore

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/qemu"
	"github.com/unwound-dev/unwound/qemu/guest"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// WildCores makes, in one boot of arch's minimal kernel, the kernel cores
// of the wild loads (fixture.WildLoads) that fixture.WildCore would make
// under qemu-user, which writes none for riscv64: the packages' root
// (dir/root, fixture.WildPackages) is the guest's file system, and
// busybox's shell runs each load and sends it SIGQUIT after
// fixture.WildDelay, the core written through a file core_pattern. The
// cores land at fixture.WildCorePath; a load that ended before its delay
// has none there (logged).
func WildCores(t testing.TB, arch, dir string, n int) {
	t.Helper()
	root := filepath.Join(dir, "root")
	type run struct {
		name, path string
	}
	var runs []run
	unlock, err := fixture.LockDir(filepath.Dir(fixture.WildCorePath(t, arch, dir, fixture.WildLoads[0], 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	r := qemu.NewInitramfs()
	if err := r.HostTree(root, "/"); err != nil {
		t.Fatal(err)
	}
	data := fixture.WildData(t, arch, dir)
	r.HostFile("/wild/data.txt", 0o644, data)
	plan := guest.Plan{Steps: []guest.Step{{Mkdir: "/var/cores"}}}
	for _, l := range fixture.WildLoads {
		for i := 0; i < n; i++ {
			path := fixture.WildCorePath(t, arch, dir, l, i)
			if _, err := os.Stat(path); err == nil {
				continue
			}
			name := fmt.Sprintf("%s-%d", l.Name, i)
			runs = append(runs, run{name, path})
			cmd := []string{shellWord("/" + l.In(root))}
			for _, a := range l.Args {
				cmd = append(cmd, shellWord(strings.ReplaceAll(a, "DATA", "/wild/data.txt")))
			}
			r.File("/wild/"+name+".in", 0o644, []byte(l.Stdin))
			// The load is the shell itself (exec), the killer a
			// background subshell: a non-interactive shell starts its
			// background commands with SIGQUIT ignored.
			script := fmt.Sprintf("cd /wild; (/usr/bin/busybox sleep %.3f; kill -QUIT $$) & exec %s <%s.in >/dev/null",
				fixture.WildDelay(arch, l, i).Seconds(), strings.Join(cmd, " "), name)
			plan.Steps = append(plan.Steps,
				guest.Step{Write: "/proc/sys/kernel/core_pattern", Data: "/var/cores/" + name + ".core"},
				guest.Step{Run: []string{"/usr/bin/busybox", "sh", "-c", script}},
				// Shipped and removed one by one: the guest's RAM holds
				// one core at a time.
				guest.Step{Ship: "/var/cores/" + name + ".core", As: "cores", Remove: true})
		}
	}
	if len(runs) == 0 {
		return
	}
	kernel, err := qemu.Kernel(arch)
	if err != nil {
		t.Fatal(err)
	}
	res := boot(t, &qemu.Machine{Arch: arch, Kernel: kernel, Initramfs: r, Memory: "2G", Timeout: 30 * time.Minute}, plan)
	t.Logf("%s wild lab: %d runs, boot to poweroff %v", arch, len(runs), res.Duration.Round(time.Millisecond))
	for _, w := range runs {
		if data, ok := res.Files["cores/"+w.name+".core"]; ok {
			keep(t, w.path, data)
		} else {
			t.Logf("%s/%s: no core (the load ended first?)", arch, w.name)
		}
	}
}

// shellWord quotes s for sh: in single quotes, and each single quote
// inside closes them, is escaped and opens them again.
func shellWord(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
