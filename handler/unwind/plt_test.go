package unwind

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// linkedPLT links a small program calling puts with a cross compiler and a
// linker (bfd: the toolchain's own), and loads it. It skips when the
// toolchain is missing.
func linkedPLT(t *testing.T, cc, ld string, flags ...string) *module.File {
	t.Helper()
	testutil.Need(t, cc)
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	prog := "#include <stdio.h>\nint main(void) { return puts(\"x\"); }\n"
	for _, fl := range flags {
		if fl == "-static" {
			// A static program's stubs are IFUNCs' (.iplt): memcpy's.
			prog = "#include <string.h>\nchar a[64], b[64];\nint main(int c, char **v) { memcpy(a, b, c); return a[0]; }\n"
		}
	}
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "p")
	args := append([]string{"-O2", "-o", exe, src}, flags...)
	if ld != "bfd" {
		testutil.Need(t, "ld."+ld)
		// A cross gcc looks for ld.<name> in its own program path.
		bin := filepath.Join(dir, "bin")
		os.Mkdir(bin, 0o755)
		p, _ := exec.LookPath("ld." + ld)
		if err := os.Symlink(p, filepath.Join(bin, "ld."+ld)); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-fuse-ld="+ld, "-B"+bin)
	}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Skipf("%s cannot link with %s here: %v\n%s", cc, ld, err, out)
	}
	return loadFile(t, exe)
}

// A thread stopped inside a PLT stub (a signal while it runs, frame 0) has
// not touched SP or the link register yet: its caller is LR exactly, at
// high trust, whatever the call before LR looks like. The stubs are the
// real ones GNU ld, lld and mold write, for every architecture; x86's lazy
// stub pushes the relocation index before it jumps to the resolver.
func TestPLTStubReturnsToLR(t *testing.T) {
	type pcase struct {
		name   string
		a      *arch.Arch
		cc     string
		flags  []string
		off    uint64 // PC's offset in the stub
		pushed int    // x86: words pushed above the return address
	}
	var cs []pcase
	for _, ld := range []string{"bfd", "lld", "mold"} {
		// x86: at the jump through the GOT, where a fault on the GOT's
		// page stops the thread: after mold's mov $index, %r11d.
		x86off := uint64(6)
		if ld == "mold" {
			x86off = 10
		}
		cs = append(cs,
			pcase{"aarch64/" + ld, arch.AArch64, "aarch64-linux-gnu-gcc", nil, 4, 0},
			pcase{"arm/" + ld, arch.ARM, "arm-linux-gnueabihf-gcc", nil, 4, 0},
			pcase{"riscv64/" + ld, arch.RISCV64, "riscv64-linux-gnu-gcc", nil, 4, 0},
			pcase{"x86_64/" + ld, arch.X86_64, "x86_64-linux-gnu-gcc", nil, x86off, 0},
		)
	}
	cs = append(cs,
		pcase{"x86_64/bfd-lazy-before-push", arch.X86_64, "x86_64-linux-gnu-gcc", []string{"-Wl,-z,lazy"}, 6, 0},
		pcase{"x86_64/bfd-lazy-after-push", arch.X86_64, "x86_64-linux-gnu-gcc", []string{"-Wl,-z,lazy"}, 11, 1},
		pcase{"x86_64/bfd-static", arch.X86_64, "x86_64-linux-gnu-gcc", []string{"-static"}, 0, 0},
		pcase{"aarch64/bfd-static", arch.AArch64, "aarch64-linux-gnu-gcc", []string{"-static"}, 4, 0},
		pcase{"arm/bfd-static", arch.ARM, "arm-linux-gnueabihf-gcc", []string{"-static"}, 4, 0},
	)
	for _, c := range cs {
		t.Run(c.name, func(t *testing.T) {
			ld := c.name[len(c.a.Name)+1:]
			if i := len("bfd"); len(ld) > i && ld[:i] == "bfd" {
				ld = "bfd"
			}
			f := linkedPLT(t, c.cc, ld, c.flags...)
			if len(f.PLTs) == 0 {
				t.Fatal("no stub section found")
			}
			st := f.PLTs[0]
			stub := st.Start
			if st.Header {
				stub += c.a.PLTHeader
				if c.a == arch.X86_64 && ld == "mold" {
					stub = st.Start + 32 // mold's resolver entry is 32 bytes
				}
			}
			if stub >= st.End {
				t.Fatalf("stub section %+v holds no stub after its header", st)
			}
			codeStart, _, _ := f.Code()
			const bias = 0x40000000
			lr := bias + f.Entry&^1 + 8 // code, after the first instructions
			if lr-bias < codeStart {
				t.Fatalf("entry %#x below the code %#x", f.Entry, codeStart)
			}
			fp := newFake(t, c.a)
			m := &module.Module{Path: "/bin/p", Start: bias, End: bias + 1<<24,
				Maps:          []module.Mapping{{Start: bias, End: bias + 1<<24, Path: "/bin/p", Perms: "r-xp"}},
				RuntimeOffset: bias, File: f}
			fp.mods = append(fp.mods, m)
			sp := uint64(stackBase + 0x1000)
			rs := regsOf(map[int]uint64{c.a.SP: sp})
			if c.a.LR >= 0 {
				rs.Set(c.a.LR, lr)
			} else {
				fp.word(sp+uint64(c.pushed*8), lr)
			}
			r := fp.unwind(bias+stub+c.off, rs, Options{NoScan: true})
			if len(r.Frames) < 2 {
				t.Fatalf("%d frames, stop %s: %s", len(r.Frames), r.Stop, r.Detail)
			}
			got := r.Frames[1]
			if got.PC != lr&^1 || got.Method != MethodPLT || got.Trust != TrustHigh {
				t.Errorf("frame 1: %#x by %s at %s trust, want %#x by plt at high trust (stop %s: %s)", got.PC, got.Method, got.Trust, lr&^1, r.Stop, r.Detail)
			}
			wantSP := sp
			if c.a.LR < 0 {
				wantSP = sp + uint64(8*(c.pushed+1))
			}
			if got.SP != wantSP {
				t.Errorf("frame 1 SP %#x, want %#x", got.SP, wantSP)
			}
		})
	}
}

// The resolver's entry at the head of .plt saves the link register on ARM
// and AArch64: a PC there is no stub's, and the PLT strategy says so.
func TestPLTHeaderRefused(t *testing.T) {
	f := linkedPLT(t, "aarch64-linux-gnu-gcc", "bfd", "-Wl,-z,lazy")
	st := f.PLTs[0]
	if !st.Header {
		t.Fatalf("%+v: want .plt with its header first", f.PLTs)
	}
	const bias = 0x40000000
	fp := newFake(t, arch.AArch64)
	fp.mods = append(fp.mods, &module.Module{Path: "/bin/p", Start: bias, End: bias + 1<<24,
		Maps:          []module.Mapping{{Start: bias, End: bias + 1<<24, Path: "/bin/p", Perms: "r-xp"}},
		RuntimeOffset: bias, File: f})
	rs := regsOf(map[int]uint64{31: stackBase + 0x1000, 30: bias + f.Entry + 8})
	r := fp.unwind(bias+st.Start+8, rs, Options{NoScan: true})
	for _, fr := range r.Frames {
		if fr.Method == MethodPLT {
			t.Errorf("frame at %#x by plt, from the resolver's entry", fr.PC)
		}
	}
}
