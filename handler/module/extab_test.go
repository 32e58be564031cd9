package module

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// A file without section headers (sstrip, llvm-objcopy --strip-sections)
// still has its .ARM.extab: found from the index entries that point into
// it. Without it every function whose unwind instructions do not fit in
// its index entry fell back to prologue analysis (medium trust).
func TestExtabWithoutSections(t *testing.T) {
	cc, objcopy := tool(t, "arm-linux-gnueabihf-gcc"), tool(t, "llvm-objcopy")
	dir := t.TempDir()
	src := filepath.Join(dir, "f.c")
	// Functions that save many registers and VFP ones: more unwind
	// instructions than an index entry holds inline.
	os.WriteFile(src, []byte(`
volatile double d; volatile int v;
void g(int);
__attribute__((noinline)) void f(int n) {
	register double x = d * n, y = d + n, z = d - n;
	int a = v, b = v + 1, c = v + 2, e = v + 3, h = v + 4, i = v + 5, j = v + 6;
	g(n);
	d = x + y + z; v = a + b + c + e + h + i + j;
}
__attribute__((noinline)) void g(int n) { if (n) f(n - 1); }
void _start(void) { f(3); for (;;); }
/* No libgcc: the personality routines the index names, never called. */
void __aeabi_unwind_cpp_pr0(void) {}
void __aeabi_unwind_cpp_pr1(void) {}
void __aeabi_unwind_cpp_pr2(void) {}
`), 0o644)
	exe := filepath.Join(dir, "f")
	testutil.Run(t, cc, "-O2", "-marm", "-mfpu=vfp", "-funwind-tables", "-nostdlib", "-static", "-o", exe, src)
	bare := exe + ".bare"
	testutil.Run(t, objcopy, "--strip-sections", exe, bare)
	load := func(p string) *File {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := Load(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return f
	}
	orig, got := load(exe), load(bare)
	if len(orig.Extab) == 0 {
		t.Fatal("fixture: the program has no .ARM.extab")
	}
	if got.Extab == nil || got.EHABI == nil {
		t.Fatalf("without section headers: extab %d bytes, EHABI %v", len(got.Extab), got.EHABI != nil)
	}
	off := got.ExtabAddr - orig.ExtabAddr
	if got.ExtabAddr < orig.ExtabAddr || off >= uint64(len(orig.Extab)) {
		t.Fatalf("extab found at %#x, the section is at %#x (%d bytes)", got.ExtabAddr, orig.ExtabAddr, len(orig.Extab))
	}
	n := min(len(orig.Extab)-int(off), len(got.Extab))
	if !bytes.Equal(orig.Extab[off:int(off)+n], got.Extab[:n]) || n < len(orig.Extab)-int(off) {
		t.Errorf("extab found differs from the section's: %d of %d bytes", n, len(orig.Extab)-int(off))
	}
}
