package handler

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// Issue 25's shapes that need a program of their own layout: a PC inside a
// PLT stub, and unwind tables whose section bias differs from the text's
// load bias. Both are built by testdata/crash/build.sh (crash.c's pltstub
// scenario; the ehbias linker) and crashed on this host as the matrix is:
// kernel cores on x86_64, qemu-user cores on AArch64 and ARM (RISC-V:
// the QEMU lab). gdb on the unstripped program is the oracle.

// pltVariants are the layouts of PLT stubs the pltstub scenario is
// crashed in: GNU ld's lazy .plt, lld's and mold's, musl's (bound at
// load), .plt.sec (GNU ld -z ibtplt, x86_64) and a static glibc
// program's .iplt (memchr is an IFUNC).
var pltVariants = []string{
	"gcc-bfd-default-dynamic", "clang-lld-default-dynamic", "gcc-mold-default-dynamic",
	"gcc-bfd-default-dynamic-musl", "gcc-ibt-default-dynamic", "gcc-bfd-default-static",
}

// TestPLTStubFrameZero: a thread stopped inside a PLT stub (the stub's
// load of its GOT slot faults) has frame 0 in the stub, its caller's
// return address still in the link register (x86_64: at the top of the
// stack) and SP untouched. The caller is exactly that return address,
// at high trust, and the walk goes on to main equal to gdb's, with no
// wrong frame at any trust.
func TestPLTStubFrameZero(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	eachGDBArch(t, func(t *testing.T, arch string) {
		for _, b := range builtVariants(t, arch, pltVariants...) {
			t.Run(b.Variant, func(t *testing.T) {
				got, want := matrixCase(t, b, "pltstub")
				if want == nil {
					t.Skip("no gdb walk of this core")
				}
				th := got.Crashed()
				wt := crashedOf(want)
				if th == nil || wt == nil || len(wt.Frames) < 2 {
					t.Fatalf("crashed thread: ours %v, gdb's %v", th, wt)
				}
				sec := pltSection(t, b, got, wt.Frames[0].PC)
				if sec == "" {
					t.Fatalf("fixture: gdb's frame 0 %s is in no PLT section of %s", wt.Frames[0].PC, b.Unstripped())
				}
				t.Logf("frame 0 in %s; ours: %s (stop %s: %s)", sec, framesOf(th), th.StopReason, th.StopDetail)
				if len(th.Frames) < 2 {
					t.Fatalf("the walk stops at frame 0 in %s, gdb's caller is %s", sec, wt.Frames[1].PC)
				}
				if th.Frames[0].PC.String() != wt.Frames[0].PC {
					t.Errorf("frame 0 %s, gdb %s", th.Frames[0].PC, wt.Frames[0].PC)
				}
				if f := th.Frames[1]; f.PC.String() != wt.Frames[1].PC || fixture.Trust(f) != "high" {
					t.Errorf("frame 1 (the stub's caller) %s by %s at %s trust; want gdb's %s at high trust", f.PC, f.Method, fixture.Trust(f), wt.Frames[1].PC)
				}
				var fig fixture.Figures
				countFigures(t, &fig, b, "pltstub", got, want)
				if len(fig.Cases) > 0 {
					t.Errorf("wrong frames: %s", strings.Join(fig.Cases, "; "))
				}
				if !fixture.GDBFollows(want, "pltstub") {
					t.Logf("gdb does not follow pl2 pl1 main here")
				} else if fig.Equal < 4 {
					t.Errorf("%d of gdb's %d frames equal, want at least the stub, pl2, pl1, main", fig.Equal, fig.Want)
				}
			})
		}
	})
}

// builtVariants are crash built in each of variants for arch, those that
// build.sh could build here (it says why not).
func builtVariants(t *testing.T, arch string, variants ...string) []fixture.Binary {
	dir := fixture.BuildVariants(t, arch, variants...)
	var bs []fixture.Binary
	for _, v := range variants {
		b := fixture.Binary{Arch: arch, Variant: v, Prog: "crash", Dir: dir}
		if _, err := os.Stat(b.Stripped()); err == nil {
			bs = append(bs, b)
		}
	}
	return bs
}

// ehBiasVariants are crash.c linked by GNU ld with the unwind tables
// (.eh_frame_hdr, .eh_frame; on ARM .ARM.exidx) moved into a PT_LOAD of
// their own whose vaddr-offset is 2 MiB off the text's.
var ehBiasVariants = []string{"gcc-ehbias-tables-dynamic", "gcc-ehbias-tables-static"}

// TestEhFrameSectionBias: where the unwind tables' section bias differs
// from the text's load bias, each table is read at its own section's
// bias, so every frame of the crashed thread equals gdb's: no repeated
// frame at high trust (libunwindstack's
// load_bias_different_section_bias_arm64 shape), no wrong frame at any
// trust, and the walk reaches main. On AArch64 and ARM, the program with
// its section headers removed (the tables found from their segments
// alone) has no wrong frame at high or medium trust either.
func TestEhFrameSectionBias(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	eachGDBArch(t, func(t *testing.T, arch string) {
		for _, b := range builtVariants(t, arch, ehBiasVariants...) {
			v := b.Variant
			if d := tableBiasDelta(t, b.Stripped()); d == 0 {
				t.Fatalf("fixture: %s has its unwind tables at the text's bias", b.Stripped())
			} else {
				t.Logf("%s: tables' vaddr-offset is %#x off the text's", v, d)
			}
			for _, sc := range []string{"nullwrite", "sighandler", "chainstore", "threads"} {
				sc := sc
				t.Run(v+"/"+sc, func(t *testing.T) {
					got, want := matrixCase(t, b, sc)
					if want == nil {
						t.Skip("no gdb walk of this core")
					}
					th := got.Crashed()
					if th == nil {
						t.Fatal("no crashed thread")
					}
					for i := 1; i < len(th.Frames); i++ {
						if th.Frames[i].PC == th.Frames[i-1].PC {
							t.Errorf("frame %d repeats frame %d's PC %s (%s/%s)", i, i-1, th.Frames[i].PC, th.Frames[i].Method, fixture.Trust(th.Frames[i]))
						}
					}
					var fig fixture.Figures
					countFigures(t, &fig, b, sc, got, want)
					if len(fig.Cases) > 0 {
						t.Errorf("wrong frames: %s\nours: %s", strings.Join(fig.Cases, "; "), framesOf(th))
					}
					if !fixture.Subsequence(b.FrameNames(t, got, got.Crashed()), fixture.KnownChains[sc]) {
						t.Errorf("the crashed thread does not reach main through %v: %s (stop %s: %s)", fixture.KnownChains[sc], framesOf(th), th.StopReason, th.StopDetail)
					}
					if arch != "x86_64" {
						noSectionHeaders(t, b, sc, want)
					}
				})
			}
		}
	})
}

// noSectionHeaders unwinds the same core with the program's section
// headers removed (llvm-objcopy --strip-sections, as sstrip does): the
// tables are then found through PT_GNU_EH_FRAME and PT_ARM_EXIDX alone,
// whose bias is their segment's. The trace may be shorter or less
// trusted (a static program has no PT_GNU_EH_FRAME: its code is then
// walked without tables), never wrong at high or medium trust. Only on
// qemu-user cores, where the handler is told the program's file.
func noSectionHeaders(t *testing.T, b fixture.Binary, scenario string, want *fixture.Trace) {
	objcopy, err := exec.LookPath("llvm-objcopy")
	if err != nil {
		t.Log("llvm-objcopy not installed: the copy without section headers is not unwound")
		return
	}
	exe := filepath.Join(t.TempDir(), "crash")
	testutil.Run(t, objcopy, "--strip-sections", b.Stripped(), exe)
	core, _ := fixture.Core(t, b, scenario)
	got := offlineReport(t, OfflineOptions{CoreFile: core, Exe: exe, Sysroot: b.Sysroot()})
	var fig fixture.Figures
	if trusted := countFigures(t, &fig, b, scenario, got, want); trusted > 0 {
		t.Errorf("without section headers, %d wrong frames at high or medium trust: %s\nours: %s", trusted, strings.Join(fig.Cases, "; "), framesOf(got.Crashed()))
	}
	t.Logf("without section headers: %d of gdb's %d frames, wrong at low trust %v: %s", fig.Equal, fig.Want, fig.Cases, framesOf(got.Crashed()))
}

func crashedOf(tr *fixture.Trace) *fixture.Thread {
	for i := range tr.Threads {
		if tr.Threads[i].Crashed {
			return &tr.Threads[i]
		}
	}
	return nil
}

func framesOf(th *report.Thread) string {
	var b strings.Builder
	for _, f := range th.Frames {
		fmt.Fprintf(&b, "%s/%s/%s ", f.PC, f.Method, fixture.Trust(f))
	}
	return b.String()
}

// pltSection names the section of the program holding gdb's frame-0 PC
// (.plt, .plt.sec, .iplt: the linkers' stub sections), "" when it is
// none of them.
func pltSection(t *testing.T, b fixture.Binary, r *report.Report, pc string) string {
	v, err := strconv.ParseUint(strings.TrimPrefix(pc, "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	var addr uint64
	found := false
	for _, m := range r.Modules {
		if m.Path == r.Exe && uint64(m.Start) <= v && v < uint64(m.End) {
			addr, found = m.FileAddr(report.Hex(v)), true
		}
	}
	if !found {
		return ""
	}
	f, err := elf.Open(b.Unstripped())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Addr <= addr && addr < s.Addr+s.Size && s.Flags&elf.SHF_EXECINSTR != 0 {
			switch s.Name {
			case ".plt", ".plt.sec", ".iplt", ".plt.got":
				return s.Name
			}
			t.Logf("frame 0 at %#x is in %s", addr, s.Name)
		}
	}
	return ""
}

// tableBiasDelta is how far the vaddr-offset of the PT_LOAD holding the
// first unwind table (.eh_frame_hdr, .eh_frame or .ARM.exidx) is from the
// executable PT_LOAD's.
func tableBiasDelta(t *testing.T, path string) int64 {
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tab *elf.Section
	for _, n := range []string{".eh_frame_hdr", ".eh_frame", ".ARM.exidx"} {
		if tab = f.Section(n); tab != nil {
			break
		}
	}
	if tab == nil {
		t.Fatalf("%s: no unwind table", path)
	}
	var text, table int64
	var haveText, haveTable bool
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		bias := int64(p.Vaddr) - int64(p.Off)
		if p.Flags&elf.PF_X != 0 && !haveText {
			text, haveText = bias, true
		}
		if p.Vaddr <= tab.Addr && tab.Addr < p.Vaddr+p.Memsz {
			table, haveTable = bias, true
		}
	}
	if !haveText || !haveTable {
		t.Fatalf("%s: no executable PT_LOAD or none holding %s", path, tab.Name)
	}
	return table - text
}

// TestEHABIGapWithoutCantUnwind: mold leaves no EXIDX_CANTUNWIND over code
// that has no index entry (GNU ld and lld fill those gaps), so a PC in
// glibc's assembly memset found __pthread_unwind_next's entry 22 KiB
// below, and the walk skipped memset's caller at high trust. A function
// many direct calls target, between the entry's start and the PC, says
// the entry is not the PC's function: no wrong frame at high or medium
// trust, on both mold builds of the wild memcpy (ARM, clang, static).
func TestEHABIGapWithoutCantUnwind(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	for _, b := range builtVariants(t, "arm", "clang-mold-default-static", "clang-mold-tables-static") {
		t.Run(b.Variant, func(t *testing.T) {
			got, want := matrixCase(t, b, "memcpy")
			if want == nil {
				t.Skip("no gdb walk of this core")
			}
			var fig fixture.Figures
			if trusted := countFigures(t, &fig, b, "memcpy", got, want); trusted > 0 || len(fig.Cases) > 0 {
				t.Errorf("wrong frames (%d at high or medium trust): %s\nours: %s", trusted, strings.Join(fig.Cases, "; "), framesOf(got.Crashed()))
			}
			t.Logf("%d of gdb's %d frames: %s", fig.Equal, fig.Want, framesOf(got.Crashed()))
		})
	}
}

// TestARMLostReturnAddressNeedsSymbol: the stop for a return address no
// longer saved decodes the PC's function from its start. On ARM neither a
// call target nor an EXIDX_CANTUNWIND entry says whether Thumb or A32
// code starts there: an -marm main, above a Thumb function of static
// glibc that a bl targets, read as Thumb bytes decoded as A32, "saved no
// return address", and the walk stopped three frames short of gdb's. In
// the lab (real kernels) and here (qemu-user cores): every frame gdb has.
func TestARMLostReturnAddressNeedsSymbol(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	dir := fixture.Build(t, "arm")
	b := fixture.Binary{Arch: "arm", Variant: "O2-static-marm-notables", Prog: "crash", Dir: dir}
	for _, sc := range []string{"nullwrite", "nullfn"} {
		t.Run(sc, func(t *testing.T) {
			got, want := matrixCase(t, b, sc)
			if want == nil {
				t.Skip("no gdb walk of this core")
			}
			th := got.Crashed()
			var fig fixture.Figures
			if trusted := countFigures(t, &fig, b, sc, got, want); trusted > 0 || len(fig.Cases) > 0 {
				t.Errorf("wrong frames (%d at high or medium trust): %s", trusted, strings.Join(fig.Cases, "; "))
			}
			if th.StopReason == unwind.StopUndefinedRA || fig.Equal < fig.Want {
				t.Errorf("%d of gdb's %d frames, stop %s (%s)", fig.Equal, fig.Want, th.StopReason, th.StopDetail)
			}
			t.Logf("%d of gdb's %d frames: %s", fig.Equal, fig.Want, framesOf(th))
		})
	}
}
