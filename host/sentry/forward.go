package sentry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/report"
	"golang.org/x/sys/unix"
)

// Options configure a Forwarder.
type Options struct {
	DSN *DSN
	// Dir is the forwarder's own directory: the collector's DIR/sentry.
	// It holds outbox/ (one file per event not yet acknowledged) and
	// journal (the event ids Sentry acknowledged or refused).
	Dir  string
	HTTP *http.Client
	Log  func(format string, args ...any)
	// QueueSize bounds the reports waiting to be written to the outbox
	// (default 1024); beyond it Stored drops the report with a log line
	// rather than wait.
	QueueSize int
	// MaxPending bounds the reports queued or in the outbox (default
	// 10000): while Sentry is away, a crash storm must not fill the
	// collector's disk. Beyond it Stored drops the report with a log line.
	MaxPending int
	// MinBackoff and MaxBackoff bound the exponential backoff after a
	// network error or a 5xx (default 1 s and 5 min).
	MinBackoff, MaxBackoff time.Duration
}

// Stats count what a Forwarder did since it started.
type Stats struct {
	Sent       int // acknowledged by Sentry (2xx)
	Dropped    int // refused for good (4xx other than 429)
	Duplicates int // Stored for a report already sent or under way
	QueueFull  int // Stored while the queue or the outbox was full: not forwarded
	Invalid    int // reports that made no event
	Attempts   int // HTTP requests
	Retries    int // attempts answered by an error or a 5xx
	Waits      int // attempts answered by 429
}

// Forwarder sends stored reports to Sentry, each once, in the order they
// were stored, without blocking the caller. It is safe for concurrent use.
type Forwarder struct {
	client *Client
	o      Options
	outbox string
	queue  chan Input

	mu      sync.Mutex
	closed  bool
	done    map[string]bool // event ids in the journal
	pending map[string]bool // event ids queued or in the outbox
	journal *os.File
	lock    *os.File // flock'd: one forwarder per directory
	stats   Stats
	wake    chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	spoolD chan struct{}
	sendD  chan struct{}
}

// NewForwarder opens (creating it if needed) the forwarder's directory,
// reads its journal and starts delivering what its outbox holds.
func NewForwarder(o Options) (*Forwarder, error) {
	if o.DSN == nil {
		return nil, errors.New("sentry: no DSN")
	}
	if o.Dir == "" {
		return nil, errors.New("sentry: no spool directory")
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 10000
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = 5 * time.Minute
		if o.MaxBackoff < o.MinBackoff {
			o.MaxBackoff = o.MinBackoff
		}
	}
	if o.Log == nil {
		o.Log = log.Printf
	}
	f := &Forwarder{
		client:  &Client{DSN: o.DSN, HTTP: o.HTTP},
		o:       o,
		outbox:  filepath.Join(o.Dir, "outbox"),
		queue:   make(chan Input, o.QueueSize),
		done:    map[string]bool{},
		pending: map[string]bool{},
		wake:    make(chan struct{}, 1),
		spoolD:  make(chan struct{}),
		sendD:   make(chan struct{}),
	}
	if err := os.MkdirAll(f.outbox, 0o755); err != nil {
		return nil, fmt.Errorf("sentry: %w", err)
	}
	// Two forwarders on one outbox would both send its entries.
	lock, err := os.OpenFile(filepath.Join(o.Dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sentry: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("sentry: %s is in use by another forwarder: %w", o.Dir, err)
	}
	f.lock = lock
	if err := f.readJournal(); err != nil {
		lock.Close()
		return nil, err
	}
	if tmps, _ := filepath.Glob(filepath.Join(f.outbox, ".tmp-*")); len(tmps) > 0 {
		for _, t := range tmps {
			os.Remove(t) // a write cut short: its report was never acknowledged to anyone
		}
	}
	names, err := f.entries()
	if err != nil {
		f.journal.Close()
		lock.Close()
		return nil, err
	}
	for _, n := range names {
		id := entryID(n)
		if f.done[id] {
			// Acknowledged, then the process stopped before removing it.
			os.Remove(filepath.Join(f.outbox, n))
			continue
		}
		f.pending[id] = true
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	go f.spool()
	go f.send()
	f.poke()
	return f, nil
}

const journalName = "journal"

// readJournal loads the ids Sentry already answered for good and opens
// the journal for appending. A torn last line (a crash mid-append) is
// ignored: its event is still in the outbox, and Sentry drops an event
// id it has seen.
func (f *Forwarder) readJournal() error {
	p := filepath.Join(f.o.Dir, journalName)
	if jf, err := os.Open(p); err == nil {
		sc := bufio.NewScanner(jf)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && validEventID(fields[0]) {
				f.done[fields[0]] = true
			}
		}
		err := sc.Err()
		jf.Close()
		if err != nil {
			return fmt.Errorf("sentry: %s: %w", p, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sentry: %w", err)
	}
	jf, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("sentry: %w", err)
	}
	f.journal = jf
	return nil
}

func validEventID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Outbox entries are named <sequence>-<event id>.json: the sequence, the
// time they were written in nanoseconds, keeps delivery in order.
const entrySuffix = ".json"

func entryID(name string) string {
	s := strings.TrimSuffix(name, entrySuffix)
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		return s[i+1:]
	}
	return ""
}

// entries lists the outbox, oldest first.
func (f *Forwarder) entries() ([]string, error) {
	des, err := os.ReadDir(f.outbox)
	if err != nil {
		return nil, fmt.Errorf("sentry: %w", err)
	}
	var out []string
	for _, de := range des {
		n := de.Name()
		if strings.HasSuffix(n, entrySuffix) && validEventID(entryID(n)) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Stored is the collector's hook: a report was stored under reportID. It
// only enqueues: it never waits on the disk or the network. raw is the
// report as stored, sym its symbolized frames (nil when there are none),
// signature the collector's crash signature ("" when none).
func (f *Forwarder) Stored(reportID string, raw []byte, rep *report.Report, sym *symbolize.Result, signature string) {
	if rep == nil {
		return
	}
	if reportID != rep.ID {
		f.o.Log("sentry: stored as %s, but the report's id is %s: using the report's", reportID, rep.ID)
	}
	id := EventID(rep.ID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if f.done[id] || f.pending[id] {
		f.stats.Duplicates++
		return
	}
	if len(f.pending) >= f.o.MaxPending {
		f.stats.QueueFull++
		f.o.Log("sentry: %d reports not yet delivered: report %s not forwarded; send it with `unwound sentry send`", len(f.pending), rep.ID)
		return
	}
	in := Input{Report: rep, Raw: raw, Symbols: sym, Signature: signature, Received: time.Now()}
	select {
	case f.queue <- in:
		f.pending[id] = true
	default:
		f.stats.QueueFull++
		f.o.Log("sentry: queue full (%d reports): report %s not forwarded; send it with `unwound sentry send`", cap(f.queue), reportID)
	}
}

// Stats returns the counters.
func (f *Forwarder) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Pending is how many reports are queued or in the outbox.
func (f *Forwarder) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// Flush waits until every report stored so far was answered for good,
// or ctx ends.
func (f *Forwarder) Flush(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for f.Pending() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentry: %d reports not delivered yet: %w", f.Pending(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Close writes what is queued to the outbox and stops delivering. What
// is left in the outbox is sent by the next Forwarder on the directory.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	close(f.queue)
	f.mu.Unlock()
	<-f.spoolD
	f.cancel()
	<-f.sendD
	err := f.journal.Close()
	f.lock.Close()
	return err
}

func (f *Forwarder) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// spool turns queued reports into events and writes them to the outbox.
func (f *Forwarder) spool() {
	defer close(f.spoolD)
	for in := range f.queue {
		id := EventID(in.Report.ID)
		ev, err := NewEvent(in)
		var payload []byte
		if err == nil {
			payload, err = ev.Payload()
		}
		if err == nil {
			name := fmt.Sprintf("%020d-%s%s", time.Now().UnixNano(), id, entrySuffix)
			err = receive.WriteFile(filepath.Join(f.outbox, name), payload, 0o600)
		}
		if err != nil {
			f.o.Log("sentry: report %s: %v", in.Report.ID, err)
			f.mu.Lock()
			delete(f.pending, id)
			f.stats.Invalid++
			f.mu.Unlock()
			continue
		}
		f.poke()
	}
}

// send delivers the outbox, oldest first, one request at a time.
func (f *Forwarder) send() {
	defer close(f.sendD)
	var until time.Time // no request before: rate limit or backoff
	failures := 0
	// batch is the outbox as last listed, oldest first: it is listed
	// again only once done with, and new entries sort after it.
	var batch []string
	for {
		if d := time.Until(until); d > 0 {
			if !f.sleep(d) {
				return
			}
		}
		if len(batch) == 0 {
			names, err := f.entries()
			if err != nil {
				f.o.Log("%v", err)
				if !f.sleep(f.o.MaxBackoff) {
					return
				}
				continue
			}
			if len(names) == 0 {
				select {
				case <-f.ctx.Done():
					return
				case <-f.wake:
				}
				continue
			}
			batch = names
		}
		name := batch[0]
		id, p := entryID(name), filepath.Join(f.outbox, name)
		f.mu.Lock()
		already := f.done[id]
		f.mu.Unlock()
		if already {
			os.Remove(p)
			batch = batch[1:]
			continue
		}
		payload, err := os.ReadFile(p)
		if err != nil {
			f.o.Log("sentry: outbox entry %s: %v", name, err)
			os.Rename(p, p+".bad")
			f.forget(id)
			batch = batch[1:]
			continue
		}
		res := f.client.Send(f.ctx, id, payload)
		if f.ctx.Err() != nil {
			return // stopping: the entry stays for the next start
		}
		f.mu.Lock()
		f.stats.Attempts++
		f.mu.Unlock()
		switch res.Outcome {
		case Sent, Drop:
			what := "sent"
			if res.Outcome == Drop {
				what = fmt.Sprintf("dropped %d", res.Status)
				f.o.Log("sentry: event %s refused, dropped: %v", id, res.Err)
			}
			if err := f.record(id, what); err != nil {
				// Not journaled: keep the entry; Sentry ignores a
				// second copy of an event id.
				f.o.Log("sentry: journal: %v", err)
				until = time.Now().Add(f.o.MaxBackoff)
				continue
			}
			os.Remove(p)
			batch = batch[1:]
			f.mu.Lock()
			if res.Outcome == Sent {
				f.stats.Sent++
			} else {
				f.stats.Dropped++
			}
			delete(f.pending, id)
			f.mu.Unlock()
			failures = 0
			until = time.Time{}
			if res.After > 0 {
				until = time.Now().Add(res.After)
			}
		case Wait:
			f.mu.Lock()
			f.stats.Waits++
			f.mu.Unlock()
			f.o.Log("sentry: rate limited for %v", res.After)
			until = time.Now().Add(res.After)
		default:
			f.mu.Lock()
			f.stats.Retries++
			f.mu.Unlock()
			failures++
			d := backoff(failures, f.o.MinBackoff, f.o.MaxBackoff)
			if res.After > d {
				d = res.After
			}
			f.o.Log("sentry: event %s: %v; retrying in %v", id, res.Err, d.Round(time.Millisecond))
			until = time.Now().Add(d)
		}
	}
}

// backoff is the wait after n failures in a row: exponential from lo,
// capped at hi, with jitter (a random point in its upper half) so that
// collectors that lost Sentry together do not return together.
func backoff(n int, lo, hi time.Duration) time.Duration {
	if lo <= 0 {
		lo = time.Second
	}
	if hi < lo {
		hi = lo
	}
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	if d > hi {
		d = hi
	}
	return d/2 + rand.N(d/2+1)
}

func (f *Forwarder) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (f *Forwarder) forget(id string) {
	f.mu.Lock()
	delete(f.pending, id)
	f.mu.Unlock()
}

// record appends id to the journal and syncs it: once this returns,
// no restart sends the event again. Only the sender goroutine writes the
// journal, and it does so without f.mu, so that Stored never waits on
// the disk.
func (f *Forwarder) record(id, what string) error {
	if _, err := fmt.Fprintf(f.journal, "%s %s %s\n", id, what, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return err
	}
	if err := f.journal.Sync(); err != nil {
		return err
	}
	f.mu.Lock()
	f.done[id] = true
	f.mu.Unlock()
	return nil
}
