package minidebuginfo_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/host/minidebuginfo"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// BenchmarkHandlerMiniDebugInfo is what reading MiniDebugInfo costs the
// handler per module, against the same module stripped plainly (the
// baseline, same run): the static C++ ARM fixture (glibc and libstdc++
// linked in: 1,860 symbols, the largest MiniDebugInfo of the fixtures),
// loaded as the handler loads a module a PC falls in, with one function
// start and one CFI lookup (which decompress it). Compare B/op and ns/op
// of the two.
func BenchmarkHandlerMiniDebugInfo(b *testing.B) {
	fx := fixture.Binary{Arch: "arm", Variant: "O2-static-notables", Prog: "crashxx", Dir: fixture.Build(b, "arm")}
	ours := filepath.Join(b.TempDir(), "crashxx")
	b.Setenv("OBJCOPY", "arm-linux-gnueabihf-objcopy")
	if _, err := minidebuginfo.Make(minidebuginfo.Options{Unstripped: fx.Unstripped(), Stripped: fx.Stripped(), Out: ours}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, path string }{{"plain", fx.Stripped()}, {"ours", ours}} {
		b.Run(c.name, func(b *testing.B) {
			f, err := os.Open(c.path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				mf, err := module.Load(f)
				if err != nil {
					b.Fatal(err)
				}
				mf.FuncStart(0x10400)
				mf.CFITables(0x10400)
				if err := mf.MiniDebugInfoError(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
