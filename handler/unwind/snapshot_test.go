package unwind_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

var update = flag.Bool("update", false, "rewrite testdata/snapshots from the crash fixtures' cores (needs the cross compilers, qemu-user and gdb-multiarch)")

// Snapshots replay real crashes offline: the crashed thread's registers,
// the stack window above its SP, and the modules' placement, from a
// fixture core; the stripped program is kept beside them and the
// libraries come from the Debian cross sysroot (skipped when their build
// IDs differ). Each records gdb's PCs on the same core and the frames the
// unwinder gave when it was written: the replay must give the same frames,
// and never a frame that differs from gdb's at high or medium trust.
var snapshots = []struct{ arch, variant, scenario string }{
	{"arm", "O2-dynamic-notables", "nullwrite"},
	{"arm", "O2-dynamic-notables", "abort"},
	{"arm", "O2-dynamic-notables", "sighandler"},
	{"arm", "O2-dynamic-notables", "nullfn"},
	{"arm", "O0-dynamic-marm-notables", "nullwrite"},
	{"arm", "O0-dynamic-marm-notables", "sighandler"},
	{"arm", "O2-dynamic-marm-notables", "threads"},
	{"arm", "O2-dynamic", "abort"},
	{"aarch64", "O2-dynamic", "nullwrite"},
	{"aarch64", "O2-dynamic", "sighandler"},
	{"x86_64", "O2-dynamic", "nullfn"},
	// RISC-V: real-kernel cores from a kept QEMU lab run (qemu-riscv64
	// writes none): UNWOUND_SNAPSHOT_LAB names the run's directory.
	{"riscv64", "O2-dynamic-notables", "nullwrite"},
	{"riscv64", "O0-dynamic-notables", "sighandler"},
	{"riscv64", "O2-dynamic", "abort"},
}

const window = 8 << 10

type snapshot struct {
	Arch    string       `json:"arch"`
	Regs    []report.Hex `json:"regs"` // NT_PRSTATUS pr_reg words
	Memory  []snapMem    `json:"memory"`
	Modules []snapMod    `json:"modules"`
	GDB     []string     `json:"gdb"`
	Golden  []snapFrame  `json:"golden"`
}

type snapMem struct {
	Addr report.Hex `json:"addr"`
	Data []byte     `json:"data"`
}

type snapMod struct {
	Path          string     `json:"path"`
	File          string     `json:"file"` // under testdata/snapshots, or "" for the sysroot
	BuildID       string     `json:"build_id"`
	Start         report.Hex `json:"start"`
	End           report.Hex `json:"end"`
	RuntimeOffset report.Hex `json:"runtime_offset"`
}

type snapFrame struct {
	PC     report.Hex `json:"pc"`
	Method string     `json:"method"`
	Trust  string     `json:"trust"`
}

func snapName(arch, variant, scenario string) string {
	return filepath.Join("testdata", "snapshots", arch+"-"+variant+"-"+scenario+".json")
}

func TestSnapshots(t *testing.T) {
	for _, sc := range snapshots {
		sc := sc
		t.Run(sc.arch+"/"+sc.variant+"/"+sc.scenario, func(t *testing.T) {
			path := snapName(sc.arch, sc.variant, sc.scenario)
			if *update {
				capture(t, sc.arch, sc.variant, sc.scenario, path)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var s snapshot
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			frames := replay(t, &s)
			if *update {
				s.Golden = frames
				write(t, path, &s)
			}
			for i, f := range frames {
				if i < len(s.GDB) && f.PC.String() != s.GDB[i] && f.Trust != "low" {
					t.Errorf("frame %d: %s at %s trust, gdb says %s", i, f.PC, f.Trust, s.GDB[i])
				}
			}
			if fmt.Sprint(frames) != fmt.Sprint(s.Golden) {
				t.Errorf("frames %v, golden %v (go test -update rewrites it)", frames, s.Golden)
			}
		})
	}
}

func replay(t *testing.T, s *snapshot) []snapFrame {
	a, err := arch.ByName(s.Arch)
	if err != nil {
		t.Fatal(err)
	}
	var mods []*module.Module
	for _, sm := range s.Modules {
		p := filepath.Join(fixture.Sysroot(s.Arch), sm.Path)
		if sm.File != "" {
			p = filepath.Join("testdata", "snapshots", sm.File)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Skipf("module %s: %v", sm.Path, err)
		}
		defer f.Close()
		m := &module.Module{Path: sm.Path, Start: uint64(sm.Start), End: uint64(sm.End),
			Maps: []module.Mapping{{Start: uint64(sm.Start), End: uint64(sm.End), Offset: uint64(sm.Start - sm.RuntimeOffset), Path: sm.Path}}}
		if err := m.LoadFrom(f); err != nil {
			t.Fatal(err)
		}
		if m.BuildID != sm.BuildID {
			t.Skipf("%s: build ID %s, the snapshot's is %s", p, m.BuildID, sm.BuildID)
		}
		mods = append(mods, m)
	}
	var mem coredump.Memory
	for _, r := range s.Memory {
		mem.Add(uint64(r.Addr), r.Data)
	}
	words := make([]uint64, len(s.Regs))
	for i, r := range s.Regs {
		words[i] = uint64(r)
	}
	pc, rs, err := a.FromPRStatus(words)
	if err != nil {
		t.Fatal(err)
	}
	thumb := a.PRStatusCPSR >= 0 && words[a.PRStatusCPSR]&0x20 != 0
	r := unwind.Unwind(&unwind.Process{Arch: a, Modules: mods, Mem: &mem}, pc, rs, unwind.Options{Thumb: thumb})
	var out []snapFrame
	for _, f := range r.Frames {
		out = append(out, snapFrame{report.Hex(f.PC), f.Method, f.Trust.String()})
	}
	return out
}

// capture writes a snapshot of the fixture's crash: the crashed thread
// only, its stack window, the modules the handler placed.
func capture(t *testing.T, archName, variant, scenario, path string) {
	dir := fixture.Build(t, archName)
	b := fixture.Binary{Arch: archName, Variant: variant, Prog: "crash", Dir: dir}
	sysroot := fixture.Sysroot(archName)
	var core string
	var kernel bool
	if archName == "riscv64" {
		lab := os.Getenv("UNWOUND_SNAPSHOT_LAB")
		if lab == "" {
			t.Skip("qemu-riscv64 writes no cores: keep a QEMU lab run (UNWOUND_LAB_KEEP=dir go test -run 'TestLab$/riscv64' ./qemu) and set UNWOUND_SNAPSHOT_LAB=dir/riscv64-riscv64-debian=false")
		}
		core, kernel = labCore(t, lab, variant, scenario), true
		sysroot = filepath.Join(lab, "root") // the guest's files, as the lab copied them
	} else {
		core, kernel = fixture.Core(t, b, scenario)
	}
	want := fixture.OracleSysroot(t, b, core, sysroot)
	opts := handler.OfflineOptions{CoreFile: core, Sysroot: sysroot, Config: config.Default(), Log: handler.NewLogger(io.Discard)}
	if !kernel {
		opts.Exe = b.Stripped()
	}
	rep, err := handler.Offline(opts)
	if err != nil {
		t.Fatal(err)
	}
	c, fm, err := readCore(core)
	if err != nil {
		t.Fatal(err)
	}
	a, err := arch.ByMachine(c.Machine, c.Class)
	if err != nil {
		t.Fatal(err)
	}
	th := c.Threads[0]
	s := snapshot{Arch: archName}
	for _, w := range th.Regs {
		s.Regs = append(s.Regs, report.Hex(w))
	}
	_, rs, _ := a.FromPRStatus(th.Regs)
	sp, _ := rs.Get(a.SP)
	for n := window; n >= 256; n /= 2 {
		buf := make([]byte, n)
		if _, err := fm.ReadAt(buf, int64(sp)); err == nil {
			s.Memory = append(s.Memory, snapMem{report.Hex(sp), bytes.TrimRight(buf, "\x00")})
			break
		}
	}
	for _, m := range rep.Modules {
		if m.Error != "" || strings.HasPrefix(m.Path, "[") {
			continue
		}
		sm := snapMod{Path: m.Path, BuildID: m.BuildID, Start: m.Start, End: m.End, RuntimeOffset: m.RuntimeOffset}
		if m.Path == rep.Exe || (!kernel && filepath.Base(m.Path) == "crash") {
			sm.File = archName + "-" + variant + "-crash"
			exe, err := os.ReadFile(b.Stripped())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("testdata", "snapshots", sm.File), exe, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s.Modules = append(s.Modules, sm)
	}
	for _, wt := range want.Threads {
		if wt.Crashed {
			for _, f := range wt.Frames {
				if f.Error == "" {
					s.GDB = append(s.GDB, f.PC)
				}
			}
		}
	}
	write(t, path, &s)
}

// labCore finds, in a kept QEMU lab run, the core of the crash program
// of variant run with scenario: its argv says both.
func labCore(t *testing.T, lab, variant, scenario string) string {
	cores, _ := filepath.Glob(filepath.Join(lab, "cores", "core.*"))
	want := "/bin/" + variant + "/crash " + scenario
	for _, p := range cores {
		if strings.HasSuffix(p, ".json") {
			continue
		}
		if c, _, err := readCore(p); err == nil && c.PRPSInfo != nil && strings.TrimSpace(c.PRPSInfo.Args) == want {
			return p
		}
	}
	t.Fatalf("no core of %q under %s", want, lab)
	return ""
}

// readCore reads the core file at path whole (the snapshots' cores are
// small) and opens it.
func readCore(path string) (*coredump.Core, *coredump.FileMemory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return coredump.OpenFile(bytes.NewReader(b), int64(len(b)), coredump.DefaultLimits)
}

func write(t *testing.T, path string, s *snapshot) {
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
