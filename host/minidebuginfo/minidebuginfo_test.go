package minidebuginfo

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/cfi"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// The program of handler/module's fixtures: three functions that call
// each other, no libc.
const src = "../../handler/module/testdata/mdi/mdi.c"

// build compiles src with the cross compiler and strips it as Yocto does;
// it returns the unstripped and the stripped file.
func build(t *testing.T, cross string, flags ...string) (string, string) {
	t.Helper()
	testutil.Need(t, cross+"gcc", cross+"strip", cross+"objcopy", "xz")
	dir := t.TempDir()
	full, stripped := filepath.Join(dir, "full"), filepath.Join(dir, "stripped")
	args := append([]string{"-g", "-O1", "-nostdlib", "-static", "-o", full, src}, flags...)
	testutil.Run(t, cross+"gcc", args...)
	testutil.Run(t, cross+"strip", "--remove-section=.comment", "--remove-section=.note", "-o", stripped, full)
	t.Setenv("OBJCOPY", cross+"objcopy")
	return full, stripped
}

// funcs lists the FUNC symbols of the unstripped file.
func funcs(t *testing.T, path string) map[string]elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]elf.Symbol{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			m[s.Name] = s
		}
	}
	return m
}

func load(t *testing.T, path string) *module.File {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	f, err := module.Load(fh)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// check loads out as the handler does and checks every function's start
// and, when wantFrames, its CFI from the MiniDebugInfo.
func check(t *testing.T, full, out string, wantFrames bool) {
	t.Helper()
	f := load(t, out)
	if !f.HasMiniDebugInfo() {
		t.Fatal("no .gnu_debugdata")
	}
	for name, s := range funcs(t, full) {
		start := s.Value &^ 1
		if got, ok := f.FuncStart(start + 1); !ok || got != start {
			t.Errorf("FuncStart(%s+1) = %#x, %v; want %#x", name, got, ok, start)
		}
		tab := f.CFITables(start)[0]
		if !wantFrames {
			if tab != nil {
				t.Errorf("%s: a .debug_frame came with the MiniDebugInfo", name)
			}
			continue
		}
		if tab == nil {
			t.Fatalf("%s: no .debug_frame from the MiniDebugInfo (%v)", name, f.MiniDebugInfoError())
		}
		fde, err := tab.Lookup(start)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, err := tab.Row(fde, start); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := f.MiniDebugInfoError(); err != nil {
		t.Fatal(err)
	}
}

// Default-flag C on ARM and RISC-V: the only CFI is .debug_frame, so all
// of it goes in.
func TestMakeCarriesUncoveredFrames(t *testing.T) {
	for _, cross := range []string{"arm-linux-gnueabihf-", "riscv64-linux-gnu-"} {
		t.Run(cross, func(t *testing.T) {
			full, stripped := build(t, cross)
			out := stripped + ".mdi"
			st, err := Make(Options{Unstripped: full, Stripped: stripped, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if st.FDEs == 0 || st.FDEsKept != st.FDEs {
				t.Errorf("kept %d of %d FDEs, want all", st.FDEsKept, st.FDEs)
			}
			check(t, full, out, true)
		})
	}
}

// Where .ARM.exidx or .eh_frame describe the code, .debug_frame is not
// paid for twice.
func TestMakeSkipsCoveredFrames(t *testing.T) {
	for _, c := range []struct{ cross, flag string }{
		// -nostdlib: no libgcc to provide the EHABI personality routines.
		{"arm-linux-gnueabihf-", "-funwind-tables -Wl,--defsym=__aeabi_unwind_cpp_pr0=0,--defsym=__aeabi_unwind_cpp_pr1=0"},
		{"aarch64-linux-gnu-", "-fasynchronous-unwind-tables"},
		{"riscv64-linux-gnu-", "-fasynchronous-unwind-tables"},
	} {
		t.Run(c.cross, func(t *testing.T) {
			full, stripped := build(t, c.cross, strings.Fields(c.flag)...)
			out := stripped + ".mdi"
			st, err := Make(Options{Unstripped: full, Stripped: stripped, Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if st.FDEsKept != 0 {
				t.Errorf("kept %d of %d FDEs, want none", st.FDEsKept, st.FDEs)
			}
			check(t, full, out, false)
		})
	}
}

// With poky's minidebuginfo feature on, the file comes with a
// symbols-only .gnu_debugdata: ours replaces it.
func TestMakeReplacesYoctos(t *testing.T) {
	full, stripped := build(t, "arm-linux-gnueabihf-")
	if _, err := Make(Options{Unstripped: full, Stripped: stripped, SymbolsOnly: true}); err != nil {
		t.Fatal(err)
	}
	check(t, full, stripped, false)
	if _, err := Make(Options{Unstripped: full, Stripped: stripped}); err != nil {
		t.Fatal(err)
	}
	check(t, full, stripped, true)
	f, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, s := range f.Sections {
		if s.Name == ".gnu_debugdata" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d .gnu_debugdata sections", n)
	}
}

// gdb reads what the tool writes: the symbols of the MiniDebugInfo name
// the functions of the stripped file.
func TestMakeGDBReadsIt(t *testing.T) {
	if _, err := exec.LookPath("gdb-multiarch"); err != nil {
		t.Skip("gdb-multiarch not installed")
	}
	full, stripped := build(t, "arm-linux-gnueabihf-")
	if _, err := Make(Options{Unstripped: full, Stripped: stripped}); err != nil {
		t.Fatal(err)
	}
	mid := funcs(t, full)["mid"]
	out := testutil.Run(t, "gdb-multiarch", "-nx", "-batch", "-ex", "info symbol "+hex(mid.Value&^1), stripped)
	if !strings.Contains(string(out), "mid in section .text") {
		t.Errorf("gdb does not name mid:\n%s", out)
	}
}

func hex(v uint64) string { return fmt.Sprintf("%#x", v) }

// FilterDebugFrame keeps CIEs, drops covered FDEs and renumbers the CIE
// pointers of those it keeps.
func TestFilterDebugFrameRenumbersCIEs(t *testing.T) {
	le := binary.LittleEndian
	var df []byte
	cie := func() uint32 {
		off := uint32(len(df))
		// length, CIE id, version 1, "" augmentation, code align 1,
		// data align -4, RA column 14, DW_CFA_def_cfa r13+0, padding.
		body := []byte{0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0x7c, 14, 0x0c, 13, 0}
		df = le.AppendUint32(df, uint32(len(body)))
		df = append(df, body...)
		return off
	}
	fde := func(c uint32, lo, n uint32) {
		df = le.AppendUint32(df, 12)
		df = le.AppendUint32(df, c)
		df = le.AppendUint32(df, lo)
		df = le.AppendUint32(df, n)
	}
	c1 := cie()
	fde(c1, 0x1000, 0x10) // covered
	c2 := cie()
	fde(c2, 0x2000, 0x10)
	fde(c1, 0x3000, 0x10)
	out, n, kept, err := FilterDebugFrame(df, 4, le, func(lo, hi uint64) bool { return lo == 0x1000 })
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || kept != 2 {
		t.Fatalf("%d FDEs, %d kept; want 3, 2", n, kept)
	}
	tab, err := cfi.NewDebugFrame(out, cfi.Arch{PtrSize: 4, Order: le})
	if err != nil {
		t.Fatal(err)
	}
	for pc, want := range map[uint64]bool{0x1004: false, 0x2004: true, 0x3004: true} {
		fde, err := tab.Lookup(pc)
		if (err == nil) != want {
			t.Errorf("Lookup(%#x): %v, want found=%v", pc, err, want)
			continue
		}
		if want {
			if _, err := tab.Row(fde, pc); err != nil {
				t.Errorf("Row(%#x): %v", pc, err)
			}
		}
	}
}

// Go programs are left alone unless asked for.
func TestMakeLeavesGoAlone(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "goprog")
	testutil.Run(t, "go", "build", "-o", full, "../../cmd/unwound-uploader")
	stripped := full + ".stripped"
	if out, err := exec.Command("strip", "--remove-section=.comment", "--remove-section=.note", "-o", stripped, full).CombinedOutput(); err != nil {
		t.Skipf("strip: %v\n%s", err, out)
	}
	if _, err := Make(Options{Unstripped: full, Stripped: stripped, Objcopy: "objcopy"}); !errors.Is(err, ErrNotApplicable) {
		t.Fatalf("Make on a Go program: %v, want ErrNotApplicable", err)
	}
}
