package handler

import (
	"io"
	"testing"

	"github.com/unwound-dev/unwound/handler/config"
	"github.com/unwound-dev/unwound/internal/fixture"
)

// TestMatchesGDB is the trust test: for every crash fixture, every
// architecture and build variant, the handler reading the stripped program
// must report, for every thread, the same PCs as gdb walking the same core
// with the unstripped program.
func TestMatchesGDB(t *testing.T) {
	if testing.Short() {
		t.Skip("gdb comparisons: not in -short")
	}
	for _, arch := range []string{"x86_64", "aarch64", "arm"} {
		arch := arch
		t.Run(arch, func(t *testing.T) {
			dir := fixture.Build(t, arch)
			for _, variant := range fixture.Variants {
				for _, sc := range append(append([]string(nil), fixture.Scenarios...), "throw") {
					prog := "crash"
					if sc == "throw" {
						prog = "crashxx"
					}
					b := fixture.Binary{Arch: arch, Variant: variant, Prog: prog, Dir: dir}
					t.Run(variant+"/"+sc, func(t *testing.T) { compareWithGDB(t, b, sc) })
				}
			}
		})
	}
}

func compareWithGDB(t *testing.T, b fixture.Binary, scenario string) {
	core, kernel := fixture.Core(t, b, scenario)
	want := fixture.Oracle(t, b, core)
	opts := OfflineOptions{CoreFile: core, Sysroot: fixture.Sysroot(b.Arch), Config: config.Default(), Log: NewLogger(io.Discard)}
	if !kernel {
		opts.Exe = b.Stripped()
	}
	got, err := Offline(opts)
	if err != nil {
		t.Fatal(err)
	}
	fixture.CompareReport(t, got, want)
}
