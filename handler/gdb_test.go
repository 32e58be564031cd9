package handler

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/config"
	"github.com/unwound-dev/unwound/handler/report"
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
	for _, arch := range []string{"x86_64", "aarch64"} {
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
	compareReport(t, got, want)
}

// compareReport checks every thread's PCs against gdb's.
func compareReport(t *testing.T, got *report.Report, want *fixture.Trace) {
	t.Helper()
	if len(got.Threads) != len(want.Threads) {
		t.Errorf("%d threads, gdb sees %d", len(got.Threads), len(want.Threads))
	}
	byTID := map[int]report.Thread{}
	for _, th := range got.Threads {
		byTID[th.TID] = th
	}
	for _, wt := range want.Threads {
		th, ok := byTID[wt.TID]
		if !ok {
			t.Errorf("thread %d missing", wt.TID)
			continue
		}
		if th.Crashed != wt.Crashed {
			t.Errorf("thread %d: crashed %v, gdb says %v", wt.TID, th.Crashed, wt.Crashed)
		}
		var wpcs []string
		for _, f := range wt.Frames {
			if f.Error == "" {
				wpcs = append(wpcs, f.PC)
			}
		}
		var gpcs []string
		for _, f := range th.Frames {
			gpcs = append(gpcs, f.PC.String())
		}
		if th.Elided > 0 {
			// Deep recursion: the first and the last frames must be gdb's
			// first and last.
			n := len(wpcs) - len(gpcs) - th.Elided
			if n != 0 {
				t.Errorf("thread %d: %d frames + %d elided, gdb walked %d", wt.TID, len(gpcs), th.Elided, len(wpcs))
			}
			if len(wpcs) >= len(gpcs) {
				wpcs = append(wpcs[:th.ElidedAt:th.ElidedAt], wpcs[len(wpcs)-(len(gpcs)-th.ElidedAt):]...)
			}
		}
		if d := diff(gpcs, wpcs, th, wt); d != "" {
			t.Errorf("thread %d (stop %s: %s):\n%s", wt.TID, th.StopReason, th.StopDetail, d)
		}
	}
}

func diff(got, want []string, th report.Thread, wt fixture.Thread) string {
	n := len(got)
	if len(want) > n {
		n = len(want)
	}
	bad := len(got) != len(want)
	var b strings.Builder
	for i := 0; i < n; i++ {
		g, w, m, fn := "-", "-", "", ""
		if i < len(got) {
			g, m = got[i], th.Frames[i].Method
		}
		if i < len(want) {
			w = want[i]
			fn = wt.Frames[i].Function + " " + wt.Frames[i].Type
		}
		mark := "  "
		if g != w {
			mark, bad = "!=", true
		} else if n > 40 && i > 8 && i < n-8 {
			continue // long traces: only the ends and the differences
		}
		fmt.Fprintf(&b, "  #%-3d %-18s %s %-18s %-7s %s\n", i, g, mark, w, m, fn)
	}
	if !bad {
		return ""
	}
	return b.String()
}
