// The sweep of direct calls whose targets name function starts: its
// results on real programs, and its speed.

package unwind

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// ARM and Thumb calls name function starts too: swept in the file's own
// instruction set (its entry point's), the targets of a real program's
// BL and BLX are its functions, and few are false. The symbols of the
// unstripped file are the reference; the sweep reads the stripped copy.
func TestCallTargetsARM(t *testing.T) {
	const cc = "arm-linux-gnueabihf-gcc"
	testutil.Need(t, cc)
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
			testutil.Run(t, cc, "-O2", mode, "-static", "-o", exe, c)
			testutil.Run(t, "arm-linux-gnueabihf-strip", "--remove-section=.comment", "--remove-section=.note", "-o", stripped, exe)
			starts := map[uint64]string{}
			for _, s := range symbols(t, exe) {
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

// BenchmarkCallTargets sweeps the host's libc for direct-call targets, as
// call-site validation does once per file on first use; "read" reads the
// same bytes alone, the baseline of the same run.
func BenchmarkCallTargets(b *testing.B) {
	const path = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(path); err != nil {
		b.Skip(err)
	}
	f := loadFile(b, path)
	start, size, ok := f.Code()
	if !ok {
		b.Skip("no code segment")
	}
	b.Run("read", func(b *testing.B) {
		buf := make([]byte, sweepChunk)
		b.SetBytes(int64(size))
		for i := 0; i < b.N; i++ {
			for off := uint64(0); off < size; off += sweepChunk {
				n := min(sweepChunk, size-off)
				if err := f.ReadCode(start+off, buf[:n]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("sweep", func(b *testing.B) {
		b.SetBytes(int64(size))
		var n int
		for i := 0; i < b.N; i++ {
			n = len(callTargets(arch.X86_64, f).all)
		}
		b.ReportMetric(float64(n), "targets")
	})
}
