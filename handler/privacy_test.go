package handler

import (
	"bytes"

	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestPrivacyPlantedSecrets crashes a real program (host kernel, under
// gdb, whose gcore writes the core: nothing global is touched) that holds
// unique secrets on its stack, in its heap, in argv, in its environment,
// in a register and as its faulting address, and checks that no report
// made from that core carries any of them in any encoding: as text, hex
// (either case, either byte order), decimal, base64, or raw bytes, in the
// JSON and in the zstd-compressed report. The faulting address is the one
// exception, and only without mask_fault_addr: the default report keeps
// it, with the option only its page is left.
func TestPrivacyPlantedSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and crashes a program under gdb")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the planted register is x86_64's r12")
	}
	for _, tool := range []string{"gcc", "gdb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (make deps)", tool)
		}
	}
	const (
		strSecret = "S3CR3T-7f2a9c41e0b5"
		envSecret = "envsecret-91c0ffee"
		numSecret = 0x5ec7e7a1b3d4 // the register and the faulting address
	)
	dir := t.TempDir()
	prog := filepath.Join(dir, "secret")
	testutil.Run(t, "gcc", "-g", "-O1", "-o", prog, "../testdata/privacy/secret.c")
	// makeCore crashes the program under gdb and saves its core; with jump,
	// the program calls the number secret, so the crashing PC is the secret.
	makeCore := func(name string, extra ...string) string {
		core := filepath.Join(dir, name)
		args := append([]string{"-nx", "-batch", "-ex", "run", "-ex", "gcore " + core,
			"--args", prog, strSecret, strconv.FormatUint(numSecret, 16)}, extra...)
		gdb := exec.Command("gdb", args...)
		gdb.Env = append(os.Environ(), "UNWOUND_SECRET="+envSecret)
		if out, err := gdb.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("SIGSEGV")) {
			t.Fatalf("gdb: %v\n%s", err, out)
		}
		raw, err := os.ReadFile(core)
		if err != nil {
			t.Fatal(err)
		}
		// The core itself holds every secret: the test plants what it means to.
		for _, s := range []string{strSecret, envSecret} {
			if !bytes.Contains(raw, []byte(s)) {
				t.Fatalf("the core does not hold %q: the program did not plant it", s)
			}
		}
		le := make([]byte, 8)
		binary.LittleEndian.PutUint64(le, numSecret)
		if !bytes.Contains(raw, le[:6]) {
			t.Fatal("the core does not hold the number secret")
		}
		return core
	}
	le := make([]byte, 8)
	binary.LittleEndian.PutUint64(le, numSecret)

	needles := func(withFault bool) map[string][]byte {
		n := map[string][]byte{}
		for _, s := range []string{strSecret, envSecret} {
			n[s] = []byte(s)
			n["hex "+s] = []byte(hex.EncodeToString([]byte(s)))
			n["base64 "+s] = []byte(base64.StdEncoding.EncodeToString([]byte(s))[:16])
			n["part of "+s] = []byte(s[4:14])
		}
		if withFault {
			be := make([]byte, 8)
			binary.BigEndian.PutUint64(be, numSecret)
			n["number, hex"] = []byte(strconv.FormatUint(numSecret, 16))
			n["number, HEX"] = []byte(strings.ToUpper(strconv.FormatUint(numSecret, 16)))
			n["number, decimal"] = []byte(strconv.FormatUint(numSecret, 10))
			n["number, little-endian hex"] = []byte(hex.EncodeToString(le[:6]))
			n["number, little-endian bytes"] = le[:6]
			n["number, big-endian bytes"] = be[2:]
			n["number, base64 LE"] = []byte(base64.StdEncoding.EncodeToString(le[:6]))
		}
		return n
	}
	check := func(t *testing.T, core string, mask bool, expectFault bool) *report.Report {
		cfg := config.Default()
		cfg.Handler.MaskFaultAddr = mask
		if cfg.Handler.IncludeCmdline {
			t.Fatal("include_cmdline is on by default")
		}
		r := offlineReport(t, OfflineOptions{CoreFile: core, Config: cfg})
		if len(r.Threads) == 0 || len(r.Threads[0].Frames) < 3 {
			t.Fatalf("no real trace: %+v", r.Threads)
		}
		js, err := report.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		plain, err := decode.JSON(js)
		if err != nil {
			t.Fatal(err)
		}
		for name, needle := range needles(true) {
			isFault := strings.HasPrefix(name, "number")
			for _, hay := range [][]byte{plain, js} {
				found := bytes.Contains(hay, needle)
				switch {
				case found && !(isFault && expectFault):
					t.Errorf("the report holds the secret (%s)", name)
				}
			}
		}
		fault := r.Signal.FaultAddr
		switch {
		case fault == nil:
			t.Error("no fault address in the report")
		case mask && uint64(*fault) != numSecret&^0xfff:
			t.Errorf("masked fault address %v, want its page %#x", *fault, uint64(numSecret&^0xfff))
		case !mask && uint64(*fault) != numSecret:
			t.Errorf("fault address %v, want %#x", *fault, uint64(numSecret))
		}
		return r
	}
	write := makeCore("core-write")
	t.Run("default", func(t *testing.T) { check(t, write, false, true) })
	t.Run("mask_fault_addr", func(t *testing.T) { check(t, write, true, false) })
	// A jump to the secret: frame 0's PC is the secret (and so is the
	// faulting address, masked here). It lies in no executable mapping, so
	// the report withholds it and still walks on from the return address.
	t.Run("pc_is_secret", func(t *testing.T) {
		r := check(t, makeCore("core-jump", "jump"), true, false)
		f := r.Threads[0].Frames
		if !f[0].Withheld || f[0].PC != 0 || f[0].Module != -1 {
			t.Errorf("frame 0 = %+v, want the PC withheld", f[0])
		}
		if f[1].Withheld || f[1].Module < 0 {
			t.Errorf("frame 1 = %+v, want the caller, in the program", f[1])
		}
	})
}

// TestWithholdData: a PC in a file's executable mapping keeps its module; in
// an executable mapping of no file it gets an "[anon]" module of its own
// (modules stay in address order, indexes follow); in the null page it is
// kept as is; anywhere else (data, stack, unmapped) it is withheld.
func TestWithholdData(t *testing.T) {
	core := &coredump.Core{Segments: []coredump.Segment{
		{Vaddr: 0x10000, Memsz: 0x1000, Flags: elf.PF_R | elf.PF_X}, // the program's text
		{Vaddr: 0x11000, Memsz: 0x1000, Flags: elf.PF_R | elf.PF_W}, // its data
		{Vaddr: 0x8000, Memsz: 0x1000, Flags: elf.PF_R | elf.PF_X},  // JIT code, below it
		{Vaddr: 0x7f000, Memsz: 0x2000, Flags: elf.PF_R | elf.PF_W}, // a stack
	}}
	r := &report.Report{
		Modules: []report.Module{{Path: "/bin/p", Start: 0x10000, End: 0x12000}},
		Threads: []report.Thread{{Frames: []report.Frame{
			{PC: 0x8010, Module: -1},   // JIT
			{PC: 0x10020, Module: 0},   // text
			{PC: 0x11008, Module: 0},   // the program's data: not code
			{PC: 0x7f100, Module: -1},  // a stack word
			{PC: 0x0, Module: -1},      // NULL call
			{PC: 0xdead00, Module: -1}, // unmapped
			{PC: 0x8020, Module: -1},   // JIT again: same module
		}}},
	}
	withholdData(r, core)
	if len(r.Modules) != 2 || r.Modules[0].Path != "[anon]" || r.Modules[0].Start != 0x8000 || r.Modules[0].End != 0x9000 || r.Modules[1].Path != "/bin/p" {
		t.Fatalf("modules %+v", r.Modules)
	}
	want := []struct {
		pc       report.Hex
		module   int
		withheld bool
	}{{0x8010, 0, false}, {0x10020, 1, false}, {0, -1, true}, {0, -1, true}, {0, -1, false}, {0, -1, true}, {0x8020, 0, false}}
	for i, f := range r.Threads[0].Frames {
		if f.PC != want[i].pc || f.Module != want[i].module || f.Withheld != want[i].withheld {
			t.Errorf("frame %d = %+v, want pc %#x module %d withheld %v", i, f, uint64(want[i].pc), want[i].module, want[i].withheld)
		}
	}

	// Without program headers only the modules vouch for a PC.
	r = &report.Report{Modules: []report.Module{{Path: "/bin/p", Start: 0x10000, End: 0x12000}},
		Threads: []report.Thread{{Frames: []report.Frame{{PC: 0x10020, Module: 0}, {PC: 0x7f100, Module: -1}}}}}
	withholdData(r, &coredump.Core{})
	if f := r.Threads[0].Frames; f[0].Withheld || !f[1].Withheld {
		t.Errorf("no segments: frames %+v", f)
	}
}
