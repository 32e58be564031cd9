// Package uploader drains the report queue, oldest first, over a
// Transport (uploader/serialup, uploader/httpup). An entry is deleted only
// once the receiver said it has the report: delivery is at least once and
// receivers deduplicate on the report id. A report the receiver will never
// take (an invalid report, HTTP 400) moves to the queue's quarantine/
// subdirectory so it does not block the reports behind it.
//
// This package does not import net/http: a board that uploads over serial
// links only what it uses.
package uploader

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"time"

	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report/decode"
)

// QuarantineDir is the subdirectory of the queue for rejected entries
// (the queue's own quarantine, bounded to queue.MaxQuarantine files).
const QuarantineDir = queue.QuarantineDir

// Item is one report to send.
type Item struct {
	Name     string // queue entry name
	ID       string // report id, 32 hex digits
	DeviceID string
	Data     []byte // the entry's bytes (.json.zst)
}

// Outcome is the receiver's verdict on an item.
type Outcome int

// Outcomes.
const (
	Delivered Outcome = iota // stored now: delete the entry
	Duplicate                // the receiver already had it: delete the entry
	Rejected                 // never acceptable: quarantine the entry
)

func (o Outcome) String() string {
	return [...]string{"delivered", "duplicate", "rejected"}[o]
}

// Result is a transport's answer for one item.
type Result struct {
	Outcome Outcome
	Reason  string // for Rejected: why
}

// Transport sends one report and says what the receiver did with it. An
// error means the outcome is unknown or temporary: the entry stays and is
// sent again later. A *RetryError asks for a minimum wait.
type Transport interface {
	Send(ctx context.Context, it Item) (Result, error)
	Close() error
}

// EmptyNotifier is a Transport that tells its receiver when the queue is
// empty (serial: a host's `unwound receive` exits then). Drain calls it
// each time it empties the queue; its error is only logged.
type EmptyNotifier interface {
	QueueEmpty(ctx context.Context) error
}

// RetryError is a temporary failure with the wait the receiver asked for
// (HTTP Retry-After).
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string {
	if e.After > 0 {
		return fmt.Sprintf("%v (retry after %v)", e.Err, e.After)
	}
	return e.Err.Error()
}

func (e *RetryError) Unwrap() error { return e.Err }

// Uploader drains one queue.
type Uploader struct {
	Queue     *queue.Queue
	Transport Transport
	DeviceID  string
	Log       func(format string, args ...any)
	// Watch wakes Run when an entry lands in the queue directory; nil is
	// inotify (Watch). When it fails, Run polls every interval.
	Watch func(dir string) (<-chan struct{}, func(), error)
}

// Stats count what a drain did.
type Stats struct {
	Delivered, Duplicates, Quarantined int
	Bytes                              int64
}

func (u *Uploader) logf(format string, args ...any) {
	if u.Log != nil {
		u.Log(format, args...)
	}
}

// Drain sends every entry, oldest first, until the queue is empty (nil)
// or a send fails (the error; the entry stays, and the ones after it wait
// so the order holds). Entries queued during the drain are sent too.
func (u *Uploader) Drain(ctx context.Context) (Stats, error) {
	var st Stats
	for {
		es, err := u.Queue.List()
		if err != nil {
			return st, err
		}
		if len(es) == 0 {
			if n, ok := u.Transport.(EmptyNotifier); ok {
				if err := n.QueueEmpty(ctx); err != nil {
					u.logf("telling the receiver the queue is empty: %v", err)
				}
			}
			return st, nil
		}
		for _, e := range es {
			if err := ctx.Err(); err != nil {
				return st, err
			}
			data, err := u.Queue.Read(e.Name)
			if errors.Is(err, os.ErrNotExist) {
				continue // removed meanwhile (evicted)
			}
			if errors.Is(err, queue.ErrCorrupt) {
				// Read moved it to the quarantine: never sent.
				u.logf("%v", err)
				st.Quarantined++
				continue
			}
			if err != nil {
				return st, err
			}
			r, err := decode.Report(data)
			if err != nil {
				if qerr := u.quarantine(e.Name, "not a valid report: "+err.Error()); qerr != nil {
					return st, qerr
				}
				st.Quarantined++
				continue
			}
			res, err := u.Transport.Send(ctx, Item{Name: e.Name, ID: r.ID, DeviceID: u.DeviceID, Data: data})
			if err != nil {
				return st, fmt.Errorf("%s: %w", e.Name, err)
			}
			switch res.Outcome {
			case Delivered, Duplicate:
				if err := u.Queue.Remove(e.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
					return st, err
				}
				if res.Outcome == Delivered {
					st.Delivered++
				} else {
					st.Duplicates++
				}
				st.Bytes += int64(len(data))
				u.logf("%s: report %s %v (%d bytes)", e.Name, r.ID, res.Outcome, len(data))
			case Rejected:
				if err := u.quarantine(e.Name, res.Reason); err != nil {
					return st, err
				}
				st.Quarantined++
			}
		}
	}
}

// quarantine moves an entry to the queue's quarantine.
func (u *Uploader) quarantine(name, reason string) error {
	dropped, err := u.Queue.Quarantine(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	u.logf("%s: quarantined: %s", name, reason)
	for _, d := range dropped {
		u.logf("quarantine full: removed %s", d)
	}
	return nil
}

// Backoff is exponential with jitter: each wait is drawn from [d/2, d],
// d doubling from Min to Max.
type Backoff struct {
	Min, Max time.Duration
	n        int
}

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	d := b.Min
	for i := 0; i < b.n && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	b.n++
	return d/2 + time.Duration(rand.Int63n(int64(d/2)+1))
}

// Reset starts over at Min.
func (b *Backoff) Reset() { b.n = 0 }

// Wait returns how long to wait after err: the backoff, or the receiver's
// Retry-After when longer.
func (b *Backoff) Wait(err error) time.Duration {
	d := b.Next()
	var re *RetryError
	if errors.As(err, &re) && re.After > d {
		d = re.After
	}
	return d
}

// Once drains with up to tries attempts, waiting between them as Backoff
// and Retry-After say (each wait at most maxWait): the --once mode.
func (u *Uploader) Once(ctx context.Context, tries int, b *Backoff, maxWait time.Duration) (Stats, error) {
	var total Stats
	for try := 1; ; try++ {
		st, err := u.Drain(ctx)
		total.add(st)
		if err == nil || try >= tries || ctx.Err() != nil {
			return total, err
		}
		w := b.Wait(err)
		if w > maxWait {
			w = maxWait
		}
		u.logf("upload failed (%v); attempt %d/%d in %v", err, try+1, tries, w.Round(time.Millisecond))
		select {
		case <-time.After(w):
		case <-ctx.Done():
			return total, ctx.Err()
		}
	}
}

func (s *Stats) add(o Stats) {
	s.Delivered += o.Delivered
	s.Duplicates += o.Duplicates
	s.Quarantined += o.Quarantined
	s.Bytes += o.Bytes
}

// Run is the daemon: drain now, then whenever the queue directory changes
// (inotify) or every interval, and after a failure once the backoff (or
// Retry-After) has passed: a link or network that is down is waited for,
// never spun on. It returns when ctx ends.
func (u *Uploader) Run(ctx context.Context, interval time.Duration, b *Backoff) error {
	watch := u.Watch
	if watch == nil {
		watch = Watch
	}
	wake, stop, err := watch(u.Queue.Dir())
	if err != nil {
		u.logf("inotify unavailable (%v): polling every %v", err, interval)
	} else {
		defer stop()
	}
	for {
		st, err := u.Drain(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := interval
		if err != nil {
			wait = b.Wait(err)
			u.logf("upload failed: %v; next attempt in %v", err, wait.Round(time.Millisecond))
		} else {
			b.Reset()
			if st.Delivered+st.Duplicates+st.Quarantined > 0 {
				u.logf("queue drained: %d delivered, %d duplicates, %d quarantined", st.Delivered, st.Duplicates, st.Quarantined)
			}
		}
		t := time.NewTimer(wait)
		woken := wake
		if err != nil {
			woken = nil // a new report does not cut a backoff short
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		case <-woken:
			t.Stop()
			// Let a burst of reports land before draining.
			time.Sleep(200 * time.Millisecond)
			select {
			case <-wake:
			default:
			}
		}
	}
}
