package receive

import (
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/unwound-dev/unwound/report/decode"
)

// Limits bound what uploads may cost the collector, whoever sends them
// (a board with a valid token can be broken or hostile). The zero value
// of each field means its default. docs/collector-limits.md has the
// figures behind them.
type Limits struct {
	// MaxBody is the largest request body: a compressed report, or plain
	// JSON. Default decode.MaxDecoded. A Content-Length above it is
	// refused (413) before a byte of the body is read.
	MaxBody int64
	// MaxInFlight uploads are read, decoded and stored at once (default
	// 8); the others wait up to Wait (default 5 s), then get 503 with
	// Retry-After, which the uploader honours.
	MaxInFlight int
	Wait        time.Duration
	// RetryAfter is the Retry-After of a 503 (default 5 s).
	RetryAfter time.Duration
	// BodyTimeout bounds the reading of a body once it has a slot
	// (default 30 s): a client that trickles its body must not hold a
	// slot for the server's whole read timeout.
	BodyTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxBody <= 0 {
		l.MaxBody = decode.MaxDecoded
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 8
	}
	if l.Wait <= 0 {
		l.Wait = 5 * time.Second
	}
	if l.RetryAfter <= 0 {
		l.RetryAfter = 5 * time.Second
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = 30 * time.Second
	}
	return l
}

// bigBody is the body size above which (or when the size is not given)
// a request takes one of bigBodies slots: most bodies are a few KiB, and
// only a few may hold up to MaxBody at once.
const (
	bigBody   = 1 << 20
	bigBodies = 2
)

// LimitUploads bounds the POSTs that reach next (other methods pass): their
// number in flight, their bodies' size, and the memory they leave
// behind. When the last upload of a burst that made a large allocation
// (a big body or a big decode) ends, the freed heap is returned to the
// system at once rather than over minutes: an RSS that stays at its peak
// looks like a leak to whoever watches the collector, and is memory the
// machine's other services do not get.
func LimitUploads(next http.Handler, l Limits, logf func(string, ...any)) http.Handler {
	l = l.withDefaults()
	g := &guard{next: next, l: l, logf: logf,
		slots: make(chan struct{}, l.MaxInFlight), big: make(chan struct{}, bigBodies)}
	return g
}

type guard struct {
	next  http.Handler
	l     Limits
	logf  func(string, ...any)
	slots chan struct{}
	big   chan struct{}

	mu       sync.Mutex
	inFlight int
	bigSeen  int64 // decode.BigDecoded() plus big bodies, at the last release
	bigBody  int64 // big bodies so far
	freeing  bool
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		g.next.ServeHTTP(w, r)
		return
	}
	if r.ContentLength > g.l.MaxBody {
		g.logf("refused a report from %s: body of %d bytes, more than %d", r.RemoteAddr, r.ContentLength, g.l.MaxBody)
		w.Header().Set("Connection", "close")
		http.Error(w, "report too large", http.StatusRequestEntityTooLarge)
		return
	}
	timer := time.NewTimer(g.l.Wait)
	defer timer.Stop()
	// acquire takes a place in sem, waiting at most until the timer
	// fires (the client is told to retry) or the client goes away.
	acquire := func(sem chan struct{}) bool {
		select {
		case sem <- struct{}{}:
			return true
		case <-timer.C:
			g.logf("busy: %d uploads in flight, told %s to retry in %v", g.l.MaxInFlight, r.RemoteAddr, g.l.RetryAfter)
			w.Header().Set("Retry-After", strconv.Itoa(int(g.l.RetryAfter/time.Second)))
			http.Error(w, "busy, retry later", http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
		return false
	}
	if !acquire(g.slots) {
		return
	}
	g.enter()
	defer g.leave()
	if r.ContentLength < 0 || r.ContentLength > bigBody {
		if !acquire(g.big) {
			return
		}
		defer func() { <-g.big }()
		g.mu.Lock()
		g.bigBody++
		g.mu.Unlock()
	}
	// Not every ResponseWriter has deadlines (httptest's recorder): then
	// the server's own ReadTimeout is the bound.
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(g.l.BodyTimeout))
	r.Body = http.MaxBytesReader(w, r.Body, g.l.MaxBody)
	g.next.ServeHTTP(w, r)
}

func (g *guard) enter() {
	g.mu.Lock()
	g.inFlight++
	g.mu.Unlock()
}

func (g *guard) leave() {
	<-g.slots
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	if seen := decode.BigDecoded() + g.bigBody; g.inFlight == 0 && seen != g.bigSeen && !g.freeing {
		g.bigSeen, g.freeing = seen, true
		go func() {
			debug.FreeOSMemory()
			g.mu.Lock()
			g.freeing = false
			g.mu.Unlock()
		}()
	}
}

// ReadBody reads a request's body of at most max bytes into a buffer of
// its announced size: io.ReadAll's doubling would leave twice the body in
// garbage. Beyond max the error is an *http.MaxBytesError.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, max)
	if n := r.ContentLength; n >= 0 && n <= max {
		b := make([]byte, n+1) // one more: a body longer than announced is an error
		m, err := io.ReadFull(body, b)
		switch {
		case err == io.ErrUnexpectedEOF || err == io.EOF:
			return b[:m], nil
		case err == nil:
			return nil, errors.New("body longer than its Content-Length")
		}
		return nil, err
	}
	return io.ReadAll(body)
}

// DiskFull reports whether err says the file system or the database is
// full: ENOSPC, EDQUOT, or SQLite's SQLITE_FULL (extended codes keep it
// in the low byte). The collector answers 507, which the uploader treats
// as temporary: it keeps the report and tries again later.
func DiskFull(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 13
}
