package admit

import (
	"errors"
	"os"
	"testing"
	"time"
)

func TestRateLimitGlobalAndPerExecutable(t *testing.T) {
	clock := int64(1000)
	now = func() int64 { return clock }
	p := Policy{Dir: t.TempDir(), Count: 2, Window: time.Hour, PerExecutable: true}
	for i := 0; i < 2; i++ {
		tk, err := Check(p, "/usr/bin/a")
		if err != nil {
			t.Fatal(err)
		}
		tk.Release()
	}
	var d *ErrDropped
	if _, err := Check(p, "/usr/bin/a"); !errors.As(err, &d) || d.Reason != ReasonRateGlobal {
		t.Fatalf("third crash: %v", err)
	}
	clock += 3600 // the window passed
	tk, err := Check(p, "/usr/bin/b")
	if err != nil {
		t.Fatal(err)
	}
	if tk.Dropped[ReasonRateGlobal] != 1 {
		t.Errorf("the next report must carry the drop: %v", tk.Dropped)
	}
	tk.Release()
	p.Count = 1
	clock += 3600
	Check(p, "/usr/bin/a")
	p.Count = 5
	if _, err := Check(p, "/usr/bin/a"); err != nil {
		t.Errorf("per-executable: %v", err)
	}
}

func TestPerExecutableLimit(t *testing.T) {
	now = func() int64 { return 5000 }
	p := Policy{Dir: t.TempDir(), Count: 2, Window: time.Hour, PerExecutable: true}
	Check(p, "/usr/bin/loop")
	Check(p, "/usr/bin/loop")
	var d *ErrDropped
	if _, err := Check(p, "/usr/bin/loop"); !errors.As(err, &d) {
		t.Fatalf("crash loop not limited: %v", err)
	}
}

func TestConcurrencySlots(t *testing.T) {
	now = func() int64 { return 1 }
	p := Policy{Dir: t.TempDir(), MaxConcurrent: 2}
	a, err1 := Check(p, "x")
	b, err2 := Check(p, "x")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	var d *ErrDropped
	if _, err := Check(p, "x"); !errors.As(err, &d) || d.Reason != ReasonConcurrency {
		t.Fatalf("third concurrent handler admitted: %v", err)
	}
	a.Release()
	c, err := Check(p, "x")
	if err != nil {
		t.Fatalf("slot not freed: %v", err)
	}
	if c.Dropped[ReasonConcurrency] != 1 {
		t.Errorf("drop not carried: %v", c.Dropped)
	}
	b.Release()
	c.Release()
}

// TestHeldUntilSettled: an admitted crash stays held until settled. One
// whose handler died (its slot released, never settled) is counted as
// handler_killed by the next admission, with the drops it carried, and
// shows in Pending; one whose handler still holds its slot is left alone;
// a settled one counts nothing, or its reason and gives its drops back.
func TestHeldUntilSettled(t *testing.T) {
	now = func() int64 { return 1 }
	p := Policy{Dir: t.TempDir(), MaxConcurrent: 3}
	Drop(p, "queue_full")
	a, _ := Check(p, "x") // carries queue_full 1
	b, _ := Check(p, "x")
	if a.Dropped["queue_full"] != 1 {
		t.Fatalf("a carries %v", a.Dropped)
	}
	a.Release() // killed: its slot goes with the process, unsettled
	if got := Pending(p.Dir); got[ReasonKilled] != 1 || got["queue_full"] != 1 || len(got) != 2 {
		t.Errorf("pending with a's handler gone: %v", got)
	}
	c, _ := Check(p, "x") // takes a's slot again
	if c.Dropped[ReasonKilled] != 1 || c.Dropped["queue_full"] != 1 || len(c.Dropped) != 2 {
		t.Errorf("c carries %v, want a's crash and its drop", c.Dropped)
	}
	d, _ := Check(p, "x") // b's and c's slots are held: nothing to count
	if len(d.Dropped) != 0 {
		t.Errorf("d carries %v while b and c still run", d.Dropped)
	}
	if !b.Settle("", 0) || b.Settle("write_error", 0) {
		t.Error("b: the first settle must count, and only it")
	}
	b.Release()
	if !c.Settle("write_error", 0) {
		t.Error("c not settled")
	}
	c.Release()
	d.Settle("", 0)
	d.Release()
	if got := Pending(p.Dir); got["write_error"] != 1 || got[ReasonKilled] != 1 || got["queue_full"] != 1 || len(got) != 3 {
		t.Errorf("pending at the end: %v, want c's loss and the drops it carried back", got)
	}
}

// TestCommitThenDeadline: a hard deadline that comes while the report is
// being stored waits for the store, and counts nothing once the report
// landed; after a failed store it counts the crash and gives its drops
// back. Each crash is counted once: stored, or in the next report.
func TestCommitThenDeadline(t *testing.T) {
	now = func() int64 { return 1 }
	p := Policy{Dir: t.TempDir(), MaxConcurrent: 2}
	Drop(p, ReasonConcurrency)
	a, _ := Check(p, "x") // carries the concurrency drop
	storing, landed := make(chan struct{}), make(chan struct{})
	var counted bool
	go func() {
		<-storing
		counted = a.Settle("deadline", 5*time.Second) // the hard deadline
		close(landed)
	}()
	err := a.Commit(func() error {
		close(storing)
		time.Sleep(50 * time.Millisecond) // the write, the fsync, the rename
		return nil
	})
	<-landed
	a.Release()
	if err != nil || counted {
		t.Errorf("stored, then the deadline: commit %v, deadline counted %v; want stored and nothing counted", err, counted)
	}
	if got := Pending(p.Dir); len(got) != 0 {
		t.Errorf("pending after a stored report: %v, want nothing (its drops went with it)", got)
	}

	Drop(p, ReasonConcurrency)
	b, _ := Check(p, "x")
	if err := b.Commit(func() error { return errors.New("ENOSPC") }); err == nil {
		t.Fatal("a failed store reported no error")
	}
	if !b.Settle("deadline", time.Second) {
		t.Error("the deadline after a failed store counted nothing")
	}
	b.Release()
	if got := Pending(p.Dir); got["deadline"] != 1 || got[ReasonConcurrency] != 1 || len(got) != 2 {
		t.Errorf("pending after a failed store and the deadline: %v, want the crash and the drop it carried", got)
	}

	// A store that outlasts the deadline's wait: the deadline gives up
	// and the ticket stays held (the next admission counts the crash as
	// killed once its slot is free: TestHeldUntilSettled).
	c, _ := Check(p, "x")
	started, release := make(chan struct{}), make(chan struct{})
	go c.Commit(func() error { close(started); <-release; return errors.New("stalled") })
	<-started
	if c.Settle("deadline", 20*time.Millisecond) {
		t.Error("the deadline settled a ticket whose store was still running")
	}
	close(release)
	c.Release()
}

// TestLandedIsNeverLost is CI's TestCrashStorm failure (201 counted for
// 200 crashes): under a storm the report landed, the handler then waited
// for the fsyncs and the state's lock past the hard deadline's wait, the
// deadline gave up and the handler exited. The next admission counted
// the crash as handler_killed, though its report was in the queue.
func TestLandedIsNeverLost(t *testing.T) {
	now = func() int64 { return 1 }
	p := Policy{Dir: t.TempDir(), MaxConcurrent: 1}
	Drop(p, ReasonConcurrency)
	a, _ := Check(p, "x") // carries the concurrency drop
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		a.Commit(func() error {
			a.Landed() // the rename
			close(started)
			<-release // the fsyncs, the state's lock: longer than the deadline waits
			return nil
		})
		close(done)
	}()
	// The handler is dead from here on: its Commit never goes on (it
	// would settle the slot's next crash as its own).
	t.Cleanup(func() { close(release); <-done })
	<-started
	if a.Settle("deadline", 20*time.Millisecond) {
		t.Error("the deadline counted a crash whose report landed")
	}
	a.slot.Close() // the handler exits: its slot is free, the crash held
	b, err := Check(p, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := Pending(p.Dir); len(got) != 0 {
		t.Errorf("pending after a landed report's handler died: %v, want nothing", got)
	}

	// The slot's mark was a's: b's own crash is lost if its handler dies.
	b.slot.Close()
	c, _ := Check(p, "x")
	if got := c.Dropped; got[ReasonKilled] != 1 || len(got) != 1 {
		t.Errorf("the report after a handler died unstored carries %v, want handler_killed 1", got)
	}
}

// A supervised child marks its parent's slot: the parent's deadline, or
// the next admission after the parent died, counts nothing.
func TestChildMarksParentsSlot(t *testing.T) {
	now = func() int64 { return 1 }
	p := Policy{Dir: t.TempDir(), MaxConcurrent: 2}
	a, _ := Check(p, "x")
	if a.Stored() {
		t.Fatal("stored before anything landed")
	}
	MarkLanded(p.Dir, a.Slot())
	if !a.Stored() {
		t.Fatal("the child's mark is not seen by the parent")
	}
	if a.Settle("deadline", time.Second) && len(Pending(p.Dir)) != 0 {
		t.Errorf("the parent's deadline counted the child's stored report: %v", Pending(p.Dir))
	}
	a.Release()
	MarkLanded(p.Dir, -1) // no slot: nothing to mark
}

func TestCorruptStateIsReset(t *testing.T) {
	p := Policy{Dir: t.TempDir(), Count: 1, Window: time.Hour}
	save(p.Dir, &state{Global: []int64{1}})
	if err := writeGarbage(p.Dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(p, "x"); err != nil {
		t.Errorf("corrupt state: %v", err)
	}
}

func writeGarbage(dir string) error {
	return os.WriteFile(dir+"/"+stateFile, []byte("g 12 x\nnonsense\n"), 0o600)
}

func TestPendingIsWhatTheNextReportCarries(t *testing.T) {
	now = func() int64 { return 5000 }
	p := Policy{Dir: t.TempDir(), Count: 1, Window: time.Hour}
	tk, _ := Check(p, "/a")
	tk.Release()
	Check(p, "/a")
	Drop(p, "queue_full")
	got := Pending(p.Dir)
	if got[ReasonRateGlobal] != 1 || got["queue_full"] != 1 || len(got) != 2 {
		t.Errorf("pending %v", got)
	}
}

func TestStateRoundTrip(t *testing.T) {
	st := &state{Global: []int64{1, 2, 3}, PerExe: map[string][]int64{"0a1b": {2}, "ffee": {}}, Dropped: map[string]int{"rate_limit": 4},
		Held: map[int]map[string]int{0: {}, 3: {"concurrency": 2, "queue_full": 1}}}
	got, err := parseState(formatState(st))
	if err != nil {
		t.Fatal(err)
	}
	if formatState(got) != formatState(st) || len(got.PerExe) != 2 || got.Dropped["rate_limit"] != 4 || len(got.Global) != 3 ||
		len(got.Held) != 2 || got.Held[3]["concurrency"] != 2 {
		t.Errorf("round trip: %q, want %q", formatState(got), formatState(st))
	}
	for _, bad := range []string{"x\n", "g 1 two\n", "d rate_limit -1\n", "d a\n", "e\n", "h\n", "h x\n", "h 1 a\n", "h 1 a -1\n", "h 2000\n"} {
		if _, err := parseState(bad); err == nil {
			t.Errorf("parseState(%q): no error", bad)
		}
	}
}

// FuzzParseState: the state file is the handler's own, but on a shared
// tmpfs; whatever it holds must parse or be refused, and what parses
// must format back to something that parses the same.
func FuzzParseState(f *testing.F) {
	f.Add("g 1 2\ne 0a1b 3\nd rate_limit 4\n")
	f.Add("")
	f.Add("g\n\n")
	f.Add("h 0\nh 1 concurrency 3 queue_full 1\n")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parseState(s)
		if err != nil {
			return
		}
		again, err := parseState(formatState(st))
		if err != nil || formatState(again) != formatState(st) {
			t.Fatalf("%q: does not round-trip: %v", s, err)
		}
	})
}
