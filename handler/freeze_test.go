package handler

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/unwind"
	"github.com/unwound-dev/unwound/internal/regular"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// TestFreezeBudgetCutSaysSo: in live mode a walk the freeze budget cuts
// short is walked again, after the release, from the snapshot: each
// thread's stack window. A deep recursion runs off that window, and the
// strategies then see missing words as the end of the tables. The stop
// says what happened (memory_unreadable, naming the freeze budget and
// the window) instead of no_unwind_info, and the report is partial: the
// QEMU lab's 7.x ARM guest cut a 100,000-frame recursion this way.
//
// The live process is the core itself here: the snapshot holds the
// crashed thread's window, as live mode keeps it, and the first pass
// finds its time already spent.
func TestFreezeBudgetCutSaysSo(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the crash fixtures")
	}
	b := fixture.Binary{Arch: "x86_64", Variant: "O0-static", Prog: "crash", Dir: fixture.Build(t, "x86_64")}
	core, _ := fixture.Core(t, b, "recursion")
	f, err := regular.Open(core)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := config.Default()
	cfg.Handler.StackWindowKiB = 16
	c := newCrash(&env{cfg: cfg, log: NewLogger(io.Discard)}, fileInput(f, &sysroot{dir: "/", exe: b.Stripped()}), time.Now())
	if _, err, archErr := c.readCore(); err != nil || archErr != nil {
		t.Fatal(err, archErr)
	}
	c.placeModules()
	snap := &coredump.Memory{}
	for _, w := range c.stackWindows() {
		buf := make([]byte, w.Hi-w.Lo)
		n, _ := c.img.mem.ReadAt(buf, int64(w.Lo))
		snap.Add(w.Lo, buf[:n])
	}
	sm := &snapMem{snap: snap, live: c.img.mem}
	c.img.mem = sm
	c.addVDSO(vdsoSize(c.img.core))
	c.unwindThreads(time.Now().Add(-time.Second), false) // the budget is spent
	sm.released.Store(true)
	c.unwindThreads(time.Now().Add(time.Minute), true)
	rep := c.report()
	th := rep.Crashed()
	if th == nil {
		t.Fatal("no crashed thread")
	}
	if th.StopReason != unwind.StopMemory || !strings.Contains(th.StopDetail, "freeze budget") || !strings.Contains(th.StopDetail, "stack_window_kib") || !rep.Partial {
		t.Errorf("stop %s (%s), partial %v: want memory_unreadable naming the freeze budget and the stack window", th.StopReason, th.StopDetail, rep.Partial)
	}
	full := offlineReport(t, OfflineOptions{CoreFile: core, Exe: b.Stripped(), Sysroot: "/"})
	ft := full.Crashed()
	if len(th.Frames)+th.Elided >= len(ft.Frames)+ft.Elided {
		t.Errorf("the cut walk has %d frames, the whole one %d", len(th.Frames)+th.Elided, len(ft.Frames)+ft.Elided)
	}
	// Both walks may elide the middle of the recursion: compare frames by
	// their depth in the walk, where both kept the frame at that depth.
	for i, f := range th.Frames {
		d := depth(th, i)
		w, ok := atDepth(ft, d)
		if !ok {
			continue
		}
		if f.PC != w.PC {
			t.Fatalf("frame %d (depth %d): %v, the whole walk has %v", i, d, f.PC, w.PC)
		}
	}
	t.Logf("%d frames walked before the window's end (of %d): %s", len(th.Frames)+th.Elided, len(ft.Frames)+ft.Elided, th.StopDetail)
}

// depth is the depth in the walk of th.Frames[i], counting the frames
// the report elided.
func depth(th *report.Thread, i int) int {
	if th.Elided > 0 && i >= th.ElidedAt {
		return i + th.Elided
	}
	return i
}

// atDepth is the frame the walk found at depth d, if the report kept it.
func atDepth(th *report.Thread, d int) (report.Frame, bool) {
	i := d
	if th.Elided > 0 && d >= th.ElidedAt {
		if d < th.ElidedAt+th.Elided {
			return report.Frame{}, false
		}
		i = d - th.Elided
	}
	if i >= len(th.Frames) {
		return report.Frame{}, false
	}
	return th.Frames[i], true
}
