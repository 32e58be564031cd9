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
package admit

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
)

// Ticket is an admitted crash: it holds a concurrency slot until Release,
// and carries the drops counted since the previous report.
type Ticket struct {
	Dropped map[string]int
	slot    *os.File
}

// Release frees the concurrency slot.
func (t *Ticket) Release() {
	if t != nil && t.slot != nil {
		t.slot.Close()
		t.slot = nil
	}
}

// ErrDropped wraps the reason a crash is not reported.
type ErrDropped struct{ Reason string }

func (e *ErrDropped) Error() string { return "crash not reported: " + e.Reason }

// state is the rate file: boot-time seconds of recent reports.
type state struct {
	Global  []int64
	PerExe  map[string][]int64
	Dropped map[string]int
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
	t := &Ticket{}
	if p.MaxConcurrent > 0 {
		slot, err := takeSlot(p.Dir, p.MaxConcurrent)
		if err != nil {
			record(p.Dir, ReasonConcurrency)
			return nil, &ErrDropped{ReasonConcurrency}
		}
		t.slot = slot
	}
	lock, err := flock.Open(filepath.Join(p.Dir, "rate.lock"), unix.LOCK_EX)
	if err != nil {
		return t, fmt.Errorf("admission lock: %w (admitting)", err)
	}
	defer lock.Close()
	st := load(p.Dir)
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
	if err := save(p.Dir, st); err != nil {
		return t, fmt.Errorf("admission state: %w", err)
	}
	return t, nil
}

// Restore gives drops back to the state when the report that carried them
// could not be written, so they are not lost.
func Restore(p Policy, dropped map[string]int) {
	if len(dropped) == 0 {
		return
	}
	lock, err := flock.Open(filepath.Join(p.Dir, "rate.lock"), unix.LOCK_EX)
	if err != nil {
		return
	}
	defer lock.Close()
	st := load(p.Dir)
	for k, v := range dropped {
		st.Dropped[k] += v
	}
	save(p.Dir, st)
}

// Abandon gives back the drops an admitted crash carried and counts the
// crash itself under reason, as Restore and Drop would, but waits at most
// within for the state's lock (polling, never blocking): it runs at the
// hard deadline, when the handler must go whatever holds the lock. It
// reports whether it recorded them.
func Abandon(p Policy, dropped map[string]int, reason string, within time.Duration) bool {
	path := filepath.Join(p.Dir, "rate.lock")
	end := time.Now().Add(within)
	for {
		lock, err := flock.Open(path, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			defer lock.Close()
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := load(p.Dir)
	for k, v := range dropped {
		st.Dropped[k] += v
	}
	st.Dropped[reason]++
	return save(p.Dir, st) == nil
}

// Pending returns the drops counted since the last admitted report: what
// the next report will carry.
func Pending(dir string) map[string]int {
	lock, err := flock.Open(filepath.Join(dir, "rate.lock"), unix.LOCK_EX)
	if err != nil {
		return nil
	}
	defer lock.Close()
	return load(dir).Dropped
}

// Drop counts a crash lost for another reason (queue full, …).
func Drop(p Policy, reason string) { record(p.Dir, reason) }

func record(dir, reason string) {
	lock, err := flock.Open(filepath.Join(dir, "rate.lock"), unix.LOCK_EX)
	if err != nil {
		return
	}
	defer lock.Close()
	st := load(dir)
	st.Dropped[reason]++
	save(dir, st)
}

func exeKey(exe string) string {
	h := sha256.Sum256([]byte(exe))
	return hex.EncodeToString(h[:8])
}

func takeSlot(dir string, n int) (*os.File, error) {
	for i := 0; i < n; i++ {
		f, err := flock.Open(filepath.Join(dir, fmt.Sprintf("slot.%d", i)), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
	}
	return nil, errors.New("every slot is taken")
}

// maxState bounds the state file: a hostile or corrupt one is reset.
const maxState = 256 << 10

// stateFile holds the state as lines of words (the handler carries no JSON
// reader):
//
//	g T...          times of admitted crashes
//	e KEY T...      the same per executable (KEY: exeKey)
//	d REASON N      crashes dropped since the last report, by reason
const stateFile = "rate.state"

func load(dir string) *state {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	st, perr := parseState(string(b))
	if err != nil || len(b) > maxState || perr != nil {
		return &state{PerExe: map[string][]int64{}, Dropped: map[string]int{}}
	}
	return st
}

func parseState(text string) (*state, error) {
	st := &state{PerExe: map[string][]int64{}, Dropped: map[string]int{}}
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
	for _, k := range keys {
		b.WriteString("d " + k + " " + strconv.Itoa(st.Dropped[k]) + "\n")
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
