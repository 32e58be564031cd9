// Package admit decides, right after the handler starts and before any
// heavy work, whether a crash is reported: a crash loop must not fill or
// wear out the flash, and a storm of handlers must not bring the board
// down. State lives in a volatile directory (/run/unwound): counting on
// the queue's entries fails once the uploader has removed them.
//
// Two bounds: at most MaxConcurrent handlers at once (flock slots), and at
// most Count reports per Window for the whole board and, with
// PerExecutable, for each program (keyed by its path, not by its thread
// name, which the program can change). A crash over a bound is counted by
// reason; the counts go into the next report that is admitted.
//
// An admitted crash is recorded as held, with its slot and the counts its
// report carries, until its outcome is (Ticket.Settle): a handler killed
// on the way (the OOM killer takes handlers first, by design) leaves the
// record behind with its slot unlocked, and the next admission counts
// that crash as ReasonKilled and gives its counts back. The moment its
// report lands in the queue is marked in the slot's file, without the
// state's lock (MarkLanded): a crash so marked is never counted lost, by
// a Settle or by the next admission, whatever killed its handler after.
package admit

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unwound-dev/unwound/internal/flock"
	"github.com/unwound-dev/unwound/internal/sha256"
	"github.com/unwound-dev/unwound/internal/smallsort"
	"golang.org/x/sys/unix"
)

// Policy bounds admission.
type Policy struct {
	Dir           string // state directory, created if missing (it is volatile)
	Count         int    // reports per Window; 0: no rate limit
	Window        time.Duration
	PerExecutable bool
	MaxConcurrent int // 0: no cap
}

// Drop reasons.
const (
	ReasonConcurrency = "concurrency"
	ReasonRateGlobal  = "rate_limit"
	ReasonRateExe     = "rate_limit_executable"
	ReasonKilled      = "handler_killed" // admitted, then gone without settling
)

// Ticket is an admitted crash: it holds a concurrency slot until Release,
// and carries the drops counted since the previous report.
type Ticket struct {
	Dropped map[string]int
	slot    *os.File
	n       int    // the slot's number
	dir     string // the state directory; "" once settled, or never held
	mu      sync.Mutex
	landed  atomic.Bool // its report is in the queue (Landed)
	marks   bool        // the slot's mark is this crash's: cleared at admission
}

// Slot is the number of the ticket's slot, -1 without one: a supervised
// child marks it with MarkLanded.
func (t *Ticket) Slot() int {
	if t == nil || !t.marks {
		return -1
	}
	return t.n
}

// Landed marks the crash's report as in the queue: call it right after
// the rename that puts it there. From then on no Settle and no later
// admission counts the crash lost.
func (t *Ticket) Landed() {
	if t == nil {
		return
	}
	t.landed.Store(true)
	if t.marks {
		mark(t.slot, landedMark)
	}
}

// MarkLanded is Landed for a supervised child, whose parent holds the
// ticket of slot n in the state directory dir.
func MarkLanded(dir string, n int) {
	if n < 0 {
		return
	}
	if f, err := os.OpenFile(slotPath(dir, n), os.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		mark(f, landedMark)
		f.Close()
	}
}

// landedMark, at the start of a slot's file, says the report of the
// crash admitted in that slot is in the queue. Admission clears it.
var landedMark, unmarked = []byte{'s'}, []byte{'-'}

// mark writes a slot file's mark in place: one byte, no lock needed.
func mark(f *os.File, m []byte) error {
	_, err := unix.Pwrite(int(f.Fd()), m, 0)
	return err
}

// landed reports whether slot n's file carries landedMark.
func landed(dir string, n int) bool {
	b, _ := os.ReadFile(slotPath(dir, n))
	return len(b) > 0 && b[0] == landedMark[0]
}

// Stored reports whether the crash's report is in the queue, marked so by
// this process or, supervised, by the child.
func (t *Ticket) Stored() bool {
	if t == nil {
		return false
	}
	if t.landed.Load() {
		return true
	}
	return t.Slot() >= 0 && landed(filepath.Dir(t.slot.Name()), t.n)
}

// Release frees the concurrency slot; Settle first, or the next admission
// takes the crash for one whose handler was killed.
func (t *Ticket) Release() {
	if t != nil && t.slot != nil {
		t.slot.Close()
		t.slot = nil
	}
}

// Settle records the crash's outcome: with reason "", its report is
// stored (or someone else counted it); else it is lost for reason, which
// is counted, and the drops it carried are given back. Only the first
// call counts, and a crash whose report landed (Landed, MarkLanded) is
// never counted lost. within > 0 bounds the whole wait (polling, never
// blocking): for the ticket, while a Commit is storing the report, and
// for the state's lock. The hard deadline settles so, as the handler must
// go whatever holds either. It reports whether it recorded the outcome.
func (t *Ticket) Settle(reason string, within time.Duration) bool {
	if t == nil {
		return false
	}
	end := time.Now().Add(within)
	if within <= 0 {
		t.mu.Lock()
	} else {
		for !t.mu.TryLock() {
			if time.Now().After(end) {
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	defer t.mu.Unlock()
	if within > 0 {
		within = max(time.Until(end), time.Millisecond) // what is left for the state's lock
	}
	return t.settleLocked(reason, within)
}

// settleLocked is Settle with the ticket's lock held.
func (t *Ticket) settleLocked(reason string, within time.Duration) bool {
	dir := t.dir
	if dir == "" {
		return false
	}
	return update(dir, within, func(st *state) {
		t.dir = "" // settled, once the lock is held
		delete(st.Held, t.n)
		if reason != "" && !t.Stored() {
			st.lose(t.Dropped, reason)
		}
	})
}

// Commit runs store, which puts the report in the queue, and settles the
// ticket as stored if it succeeds or the report landed (Landed) before an
// error, with no Settle in between: a hard deadline that comes while the
// report is being stored waits for the outcome (Settle with within)
// instead of counting as lost a report that lands a moment later. On an
// error before the report landed the ticket stays unsettled, for the
// caller to settle with the reason.
func (t *Ticket) Commit(store func() error) error {
	if t == nil {
		return store()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	err := store()
	if err == nil || t.landed.Load() {
		t.settleLocked("", 0)
	}
	return err
}

// update changes the state under its lock, waiting for the lock at most
// within when > 0, and reports whether it saved the change.
func update(dir string, within time.Duration, change func(*state)) bool {
	lock := lockState(dir, within)
	if lock == nil {
		return false
	}
	defer lock.Close()
	st := load(dir)
	change(st)
	return save(dir, st) == nil
}

// lockState takes the state's lock, waiting at most within when > 0
// (nil then if it is still held).
func lockState(dir string, within time.Duration) *os.File {
	path := filepath.Join(dir, "rate.lock")
	if within <= 0 {
		f, _ := flock.Open(path, unix.LOCK_EX)
		return f
	}
	for end := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		f, err := flock.Open(path, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(end) {
			return f
		}
	}
}

// ErrDropped wraps the reason a crash is not reported.
type ErrDropped struct{ Reason string }

func (e *ErrDropped) Error() string { return "crash not reported: " + e.Reason }

// state is the rate file: boot-time seconds of recent reports, the drops
// since the last report, and the admitted crashes not settled yet.
type state struct {
	Global  []int64
	PerExe  map[string][]int64
	Dropped map[string]int
	Held    map[int]map[string]int // by slot: the drops the crash carries
}

// lose counts a crash lost for reason, and gives back the drops its
// report was to carry.
func (st *state) lose(carried map[string]int, reason string) {
	for k, v := range carried {
		st.Dropped[k] += v
	}
	st.Dropped[reason]++
}

// reapHeld counts the held crashes whose handler is gone: its slot is
// mine (taken again, so free before) or free. One whose slot is taken
// may still be at work, or its slot is being taken again: that taker's
// own admission reaps it.
func (st *state) reapHeld(dir string, mine int) {
	for n, carried := range st.Held {
		if n != mine {
			f, err := flock.Open(slotPath(dir, n), unix.LOCK_EX|unix.LOCK_NB)
			if err != nil {
				continue
			}
			f.Close()
		}
		if !landed(dir, n) {
			st.lose(carried, ReasonKilled)
		}
		delete(st.Held, n)
	}
}

// now is CLOCK_BOOTTIME: it does not jump when NTP sets the wall clock,
// and the state dies with the boot anyway (/run is a tmpfs).
var now = func() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return time.Now().Unix()
	}
	return int64(ts.Sec) // int32 on 32-bit ARM
}

// Check admits or drops a crash of the program exe.
func Check(p Policy, exe string) (*Ticket, error) {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return &Ticket{}, fmt.Errorf("admission state %s: %w (admitting)", p.Dir, err)
	}
	t := &Ticket{n: -1}
	if p.MaxConcurrent > 0 {
		slot, n, err := takeSlot(p.Dir, p.MaxConcurrent)
		if err != nil {
			record(p.Dir, ReasonConcurrency)
			return nil, &ErrDropped{ReasonConcurrency}
		}
		t.slot, t.n = slot, n
	}
	lock, err := flock.Open(filepath.Join(p.Dir, "rate.lock"), unix.LOCK_EX)
	if err != nil {
		return t, fmt.Errorf("admission lock: %w (admitting)", err)
	}
	defer lock.Close()
	st := load(p.Dir)
	if t.n >= 0 {
		st.reapHeld(p.Dir, t.n)
		// The slot's mark was the previous crash's: cleared, or this
		// crash is not tracked (a kill would otherwise read as landed).
		t.marks = mark(t.slot, unmarked) == nil
	}
	n := now()
	keep := func(ts []int64) []int64 {
		var out []int64
		for _, x := range ts {
			if n-x < int64(p.Window/time.Second) {
				out = append(out, x)
			}
		}
		return out
	}
	st.Global = keep(st.Global)
	key := exeKey(exe)
	for k, v := range st.PerExe {
		if v = keep(v); len(v) == 0 {
			delete(st.PerExe, k)
		} else {
			st.PerExe[k] = v
		}
	}
	if p.Count > 0 {
		reason := ""
		if len(st.Global) >= p.Count {
			reason = ReasonRateGlobal
		} else if p.PerExecutable && len(st.PerExe[key]) >= p.Count {
			reason = ReasonRateExe
		}
		if reason != "" {
			st.Dropped[reason]++
			save(p.Dir, st)
			t.Release()
			return nil, &ErrDropped{reason}
		}
	}
	st.Global = append(st.Global, n)
	st.PerExe[key] = append(st.PerExe[key], n)
	if len(st.Dropped) > 0 {
		t.Dropped = st.Dropped
		st.Dropped = map[string]int{}
	}
	if t.marks {
		st.Held[t.n] = t.Dropped
	}
	if err := save(p.Dir, st); err != nil {
		return t, fmt.Errorf("admission state: %w", err)
	}
	if t.marks {
		t.dir = p.Dir
	}
	return t, nil
}

// Lost counts a crash whose report could not be written, and gives back
// the drops it carried, so that neither is lost: for a supervised child,
// whose parent holds the ticket (Ticket.Settle does the same).
func Lost(p Policy, carried map[string]int, reason string) {
	update(p.Dir, 0, func(st *state) { st.lose(carried, reason) })
}

// Pending returns the drops counted since the last admitted report: what
// the next report will carry, with the crashes whose handler is gone.
func Pending(dir string) map[string]int {
	lock, err := flock.Open(filepath.Join(dir, "rate.lock"), unix.LOCK_EX)
	if err != nil {
		return nil
	}
	defer lock.Close()
	st := load(dir)
	st.reapHeld(dir, -1)
	return st.Dropped
}

// Drop counts a crash lost for another reason (queue full, …).
func Drop(p Policy, reason string) { record(p.Dir, reason) }

func record(dir, reason string) {
	update(dir, 0, func(st *state) { st.Dropped[reason]++ })
}

func exeKey(exe string) string {
	h := sha256.Sum256([]byte(exe))
	return hex.EncodeToString(h[:8])
}

func takeSlot(dir string, n int) (*os.File, int, error) {
	for i := 0; i < n; i++ {
		f, err := flock.Open(slotPath(dir, i), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, i, nil
		}
	}
	return nil, 0, errors.New("every slot is taken")
}

func slotPath(dir string, n int) string { return filepath.Join(dir, "slot."+strconv.Itoa(n)) }

// maxState bounds the state file: a hostile or corrupt one is reset.
const maxState = 256 << 10

// stateFile holds the state as lines of words (the handler carries no JSON
// reader):
//
//	g T...          times of admitted crashes
//	e KEY T...      the same per executable (KEY: exeKey)
//	d REASON N      crashes dropped since the last report, by reason
//	h SLOT [REASON N]...  an admitted crash not settled, in SLOT, and
//	                the drops its report carries
const stateFile = "rate.state"

func load(dir string) *state {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	st, perr := parseState(string(b))
	if err != nil || len(b) > maxState || perr != nil {
		return &state{PerExe: map[string][]int64{}, Dropped: map[string]int{}, Held: map[int]map[string]int{}}
	}
	return st
}

func parseState(text string) (*state, error) {
	st := &state{PerExe: map[string][]int64{}, Dropped: map[string]int{}, Held: map[int]map[string]int{}}
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var ok bool
		switch {
		case f[0] == "g":
			st.Global, ok = parseTimes(f[1:])
		case f[0] == "e" && len(f) >= 2:
			st.PerExe[f[1]], ok = parseTimes(f[2:])
		case f[0] == "d" && len(f) == 3:
			n, err := strconv.Atoi(f[2])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("rate state: bad count %q", line)
			}
			st.Dropped[f[1]] = n
			continue
		case f[0] == "h" && len(f)%2 == 0:
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 0 || n > 1<<10 {
				return nil, fmt.Errorf("rate state: bad slot %q", line)
			}
			carried := map[string]int{}
			for i := 2; i < len(f); i += 2 {
				c, err := strconv.Atoi(f[i+1])
				if err != nil || c < 0 {
					return nil, fmt.Errorf("rate state: bad count %q", line)
				}
				carried[f[i]] = c
			}
			st.Held[n] = carried
			continue
		default:
			return nil, fmt.Errorf("rate state: bad line %q", line)
		}
		if !ok {
			return nil, fmt.Errorf("rate state: bad time in %q", line)
		}
	}
	return st, nil
}

// parseTimes parses words as times.
func parseTimes(words []string) ([]int64, bool) {
	out := make([]int64, 0, len(words))
	for _, w := range words {
		t, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, t)
	}
	return out, true
}

func formatState(st *state) string {
	var b strings.Builder
	line := func(head string, ts []int64) {
		b.WriteString(head)
		for _, t := range ts {
			b.WriteByte(' ')
			b.WriteString(strconv.FormatInt(t, 10))
		}
		b.WriteByte('\n')
	}
	line("g", st.Global)
	keys := make([]string, 0, len(st.PerExe))
	for k := range st.PerExe {
		keys = append(keys, k)
	}
	smallsort.Strings(keys)
	for _, k := range keys {
		line("e "+k, st.PerExe[k])
	}
	keys = keys[:0]
	for k := range st.Dropped {
		keys = append(keys, k)
	}
	smallsort.Strings(keys)
	counts := func(m map[string]int) {
		keys = keys[:0]
		for k := range m {
			keys = append(keys, k)
		}
		smallsort.Strings(keys)
		for _, k := range keys {
			b.WriteString(" " + k + " " + strconv.Itoa(m[k]))
		}
	}
	for _, k := range keys {
		b.WriteString("d " + k + " " + strconv.Itoa(st.Dropped[k]) + "\n")
	}
	for n, left := 0, len(st.Held); left > 0 && n <= 1<<10; n++ {
		if carried, ok := st.Held[n]; ok {
			left--
			b.WriteString("h " + strconv.Itoa(n))
			counts(carried)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func save(dir string, st *state) error {
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, []byte(formatState(st)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}
