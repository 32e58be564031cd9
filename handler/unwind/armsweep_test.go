package unwind

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// ARM and Thumb calls name function starts too: swept in the file's own
// instruction set (its entry point's), the targets of a real program's
// BL and BLX are its functions, and few are false. The symbols of the
// unstripped file are the reference; the sweep reads the stripped copy.
func TestCallTargetsARM(t *testing.T) {
	const cc = "arm-linux-gnueabihf-gcc"
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("needs " + cc)
	}
	src := `
__attribute__((noinline)) int leaf(int x) { return x * 3; }
__attribute__((noinline)) int mid(int x) { return leaf(x) + leaf(x + 1); }
__attribute__((noinline)) int top(int x) { return mid(x) * mid(x - 1); }
int main(int argc, char **argv) { (void)argv; return top(argc) + 1; }
`
	for _, mode := range []string{"-mthumb", "-marm"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			c := filepath.Join(dir, "p.c")
			if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			exe, stripped := filepath.Join(dir, "p"), filepath.Join(dir, "p.stripped")
			if out, err := exec.Command(cc, "-O2", mode, "-static", "-o", exe, c).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if out, err := exec.Command("arm-linux-gnueabihf-strip", "--remove-section=.comment", "--remove-section=.note", "-o", stripped, exe).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			ef, err := elf.Open(exe)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			syms, err := ef.Symbols()
			if err != nil {
				t.Fatal(err)
			}
			starts := map[uint64]string{}
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
					starts[s.Value&^1] = s.Name
				}
			}
			targets := callTargets(arch.ARM, loadFile(t, stripped)).all
			found := map[string]bool{}
			falses := 0
			for _, tg := range targets {
				if n, ok := starts[tg]; ok {
					found[n] = true
				} else {
					falses++
				}
			}
			want := []string{"leaf", "mid", "top"}
			if mode == "-marm" {
				want = want[1:] // A32 leaves are not told from Thumb-2 read as words
			}
			for _, n := range want {
				if !found[n] {
					t.Errorf("%s is called directly, and not among the %d targets", n, len(targets))
				}
			}
			t.Logf("%s: %d targets, %d at a function symbol, %d false (%.1f%%)", mode, len(targets), len(targets)-falses, falses, 100*float64(falses)/float64(max(1, len(targets))))
			if falses*10 > len(targets) {
				t.Errorf("%d of %d targets are no function's start", falses, len(targets))
			}
		})
	}
}
