package serialproto

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/unwound-dev/unwound/internal/sha256"
)

// Options tune a Sender. Zero values take the defaults.
type Options struct {
	Window   int           // data frames in flight (default 16, max 64)
	InFlight int           // data bytes in flight (default 4096): what waits in the line's buffers delays every ack
	Chunk    int           // largest data bytes per frame (default 512 text, 1024 binary; max MaxPayload-8)
	MinChunk int           // smallest, on a noisy line (default 64)
	Binary   bool          // ask for binary framing (a dedicated UART)
	RTO      time.Duration // longest wait for a reply before resending (default from Baud); less once round trips were measured
	Baud     int           // line speed, to size the default RTO (default 115200)
	Retries  int           // timeouts in a row without progress before giving up (default 8)
	Name     string        // sent in the hello (the device id)
}

// MaxChunk is the largest data chunk a frame carries.
const MaxChunk = MaxPayload - 8

func (o *Options) defaults() {
	if o.Window <= 0 {
		o.Window = 16
	}
	if o.Window > 64 {
		o.Window = 64
	}
	if o.InFlight <= 0 {
		o.InFlight = 4096
	}
	if o.Chunk <= 0 {
		o.Chunk = 512
		if o.Binary {
			o.Chunk = 1024
		}
	}
	if o.Chunk > MaxChunk {
		o.Chunk = MaxChunk
	}
	if o.MinChunk <= 0 {
		o.MinChunk = 64
	}
	if o.MinChunk > o.Chunk {
		o.MinChunk = o.Chunk
	}
	if o.Baud <= 0 {
		o.Baud = 115200
	}
	if o.RTO <= 0 {
		// One second plus the time the data in flight and its acks
		// take on the line (10 bits per byte, base64 is 4/3).
		line := time.Duration((o.InFlight+o.Chunk+40*o.Window)*4/3) * time.Second / time.Duration(o.Baud/10)
		o.RTO = time.Second + 2*line
	}
	if o.Retries <= 0 {
		o.Retries = 8
	}
}

// ErrLinkDown means the receiver stopped answering: Retries timeouts in a
// row. The caller closes the port, waits and tries again later.
var ErrLinkDown = errors.New("serial link: no answer from the receiver")

// ErrClosed means the byte stream failed (port closed, EIO).
var ErrClosed = errors.New("serial link: closed")

// Sender is the uploader's end of a session.
type Sender struct {
	c    *Conn
	opt  Options
	peer Hello

	// chunk is the data bytes per frame now, between MinChunk and
	// Chunk: the size that carries the most data at the error rate
	// measured (lost frames per byte sent, forgetting the past by half
	// every frameHalfLife bytes). It shrinks on a noisy line and grows
	// back on a clean one, and carries over from report to report.
	chunk        int
	lost, tested float64
	// srtt and rttvar estimate the round trip of a frame and its ack
	// (as TCP does, RFC 6298), measured on acks that name the frame they
	// answer; 0 before the first.
	srtt, rttvar time.Duration

	// Stats of the last Send, for logs and tests.
	Resent   int // data frames sent again
	Chunks   int // chunk size when the last Send ended
	Timeouts int // waits that ended without an answer
}

// NewSender uses c with opt.
func NewSender(c *Conn, opt Options) *Sender {
	opt.defaults()
	return &Sender{c: c, opt: opt, chunk: opt.Chunk}
}

// Peer is the receiver's hello, after Handshake.
func (s *Sender) Peer() Hello { return s.peer }

// Handshake sends hellos until the receiver answers one, and adopts the
// smaller window and chunk.
func (s *Sender) Handshake(ctx context.Context) error {
	flags := uint8(FlagSack)
	if s.opt.Binary {
		flags |= FlagBinary
	}
	hello := Hello{Role: RoleUploader, Flags: flags, Window: uint8(s.opt.Window), Chunk: uint16(s.opt.Chunk), Name: s.opt.Name}.Encode()
	return s.ask(ctx, s.opt.Retries, THello, hello, func(seq uint32, f Frame) bool {
		if f.Type != THello {
			return false
		}
		h, err := ParseHello(f.Payload)
		if err != nil || h.Role != RoleReceiver || h.Echo != seq {
			return false
		}
		s.peer = h
		if h.Window > 0 && int(h.Window) < s.opt.Window {
			s.opt.Window = int(h.Window)
		}
		if h.Chunk > 0 && int(h.Chunk) < s.opt.Chunk {
			s.opt.Chunk = int(h.Chunk)
		}
		s.opt.MinChunk = min(s.opt.MinChunk, s.opt.Chunk)
		s.chunk = min(s.chunk, s.opt.Chunk)
		// Binary framing only when both asked for it: a receiver that
		// predates it answers without the flag, and text stays.
		s.c.SetBinary(s.opt.Binary && h.Flags&FlagBinary != 0)
		return true
	})
}

// ask sends a frame of type t and waits up to one RTO for a frame that
// answers it (answers is told the sequence number sent), resending up to
// tries times; ErrLinkDown when no answer came.
func (s *Sender) ask(ctx context.Context, tries int, t Type, payload []byte, answers func(seq uint32, f Frame) bool) error {
	for try := 0; try < tries; try++ {
		seq, err := s.c.Send(t, payload)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrClosed, err)
		}
		deadline := time.Now().Add(s.rto())
		for {
			f, err := s.recv(ctx, deadline)
			if err == errTimeout {
				break
			}
			if err != nil {
				return err
			}
			if answers(seq, f) {
				return nil
			}
		}
	}
	return ErrLinkDown
}

var errTimeout = errors.New("timeout")

// frameOverhead is what a data frame costs beside its data (header, data
// header, CRC; the delimiters, or base64's padding and the magic, about
// the same); frameHalfLife how fast the error rate forgets.
const (
	frameOverhead = 24
	frameHalfLife = 16 << 10
)

// outcome takes in one data frame of n bytes received or lost, and sets
// the chunk size. A frame of L bytes is received whole with probability
// (1-p)^(L+h) at p errors per byte; the data carried per byte sent,
// L/(L+h) (1-p)^(L+h), is largest where L(L+h) = h/p.
func (s *Sender) outcome(n uint32, lost bool) {
	s.tested += float64(n + frameOverhead)
	if lost {
		s.lost++
	}
	for s.tested > frameHalfLife {
		s.tested /= 2
		s.lost /= 2
	}
	if s.lost < 0.01 {
		s.chunk = s.opt.Chunk
		return
	}
	p, h := s.lost/s.tested, float64(frameOverhead)
	best := (math.Sqrt(h*h+4*h/p) - h) / 2
	s.chunk = int(min(max(best, float64(s.opt.MinChunk)), float64(s.opt.Chunk)))
}

// minRTO bounds the measured timeout from below.
const minRTO = 200 * time.Millisecond

// rto is how long to wait for an answer: from the measured round trips,
// within [minRTO, opt.RTO].
func (s *Sender) rto() time.Duration {
	if s.srtt == 0 {
		return s.opt.RTO
	}
	return min(max(s.srtt+4*s.rttvar, minRTO), s.opt.RTO)
}

// lineTime is how long n data bytes, framed, take on the line.
func (s *Sender) lineTime(n int) time.Duration {
	wire := n + n/8 // frame overhead at small chunks
	if !s.c.Binary() {
		wire = wire * 4 / 3
	}
	return time.Duration(wire) * time.Second / time.Duration(s.opt.Baud/10)
}

// sample takes in one measured round trip.
func (s *Sender) sample(d time.Duration) {
	if d <= 0 {
		d = time.Millisecond
	}
	if s.srtt == 0 {
		s.srtt, s.rttvar = d, d/2
		return
	}
	diff := s.srtt - d
	if diff < 0 {
		diff = -diff
	}
	s.rttvar = (3*s.rttvar + diff) / 4
	s.srtt = (7*s.srtt + d) / 8
}

func (s *Sender) recv(ctx context.Context, deadline time.Time) (Frame, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case f, ok := <-s.c.Frames():
		if !ok {
			return Frame{}, fmt.Errorf("%w: %v", ErrClosed, s.c.Err())
		}
		return f, nil
	case <-t.C:
		return Frame{}, errTimeout
	case <-ctx.Done():
		return Frame{}, ctx.Err()
	}
}

// Send transfers one report and returns the receiver's verdict: Stored or
// Duplicate (delete the entry), Rejected (quarantine it). An error means
// the outcome is unknown: keep the entry and try again later.
func (s *Sender) Send(ctx context.Context, id ID, data []byte) (Status, error) {
	if uint64(len(data)) > 1<<32-1 {
		return Rejected, errors.New("report larger than 4 GiB")
	}
	s.Resent, s.Timeouts = 0, 0
	defer func() { s.Chunks = s.chunk }()
	offer := Offer{ID: id, Size: uint32(len(data)), SHA256: sha256.Sum256(data)}
	x := &xfer{s: s, data: data, size: uint32(len(data)), sack: s.peer.Flags&FlagSack != 0}
	timeouts := 0
	for timeouts < s.opt.Retries {
		// Offer, and learn what the receiver already holds.
		seq, err := s.c.Send(TOffer, offer.Encode())
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrClosed, err)
		}
		x.reset(seq)
		got := false
		deadline := time.Now().Add(s.rto())
		for !got {
			f, r, err := s.recvReply(ctx, deadline, id)
			if err == errTimeout {
				break
			}
			if err != nil {
				return 0, err
			}
			done, acked, _ := x.answer(f, r)
			if done {
				return r.Status, nil
			}
			got = acked
		}
		if !got {
			timeouts++
			s.Timeouts++
			continue
		}
		timeouts = 0
		// Data: up to a window of frames in flight; each ack says what
		// the receiver holds, and a frame sent before the one it answers
		// that it does not hold was lost (a serial line keeps order).
		// The timer runs from the last progress: RTO while data is in
		// flight, the full one for the done (the receiver checks the
		// sha256 and syncs the report to disk first).
		mark := time.Now()
		reoffer, probed := false, false
		for !reoffer {
			if err := x.fill(); err != nil {
				return 0, fmt.Errorf("%w: %v", ErrClosed, err)
			}
			// Never less than the line needs for the data in flight:
			// its acks cannot come sooner.
			wait := max(s.rto(), 2*s.lineTime(x.inflight()))
			if x.complete() {
				// A lost done costs this wait and a second offer
				// (answered "duplicate"): twice the round trip, half a
				// second at least for the hash and the sync.
				wait = min(max(2*wait, 500*time.Millisecond), s.opt.RTO)
			}
			deadline := mark.Add(wait)
			// Tail probe: with all data sent, frames lost at the end
			// have no later frame to reveal them. Half a round trip
			// after the last ack was due, send the last frame again:
			// its ack shows what is missing, sooner than a timeout.
			var probe time.Time
			if last, ok := x.last(); ok && !probed && x.sack && s.srtt > 0 && x.next >= x.size {
				if t := last.at.Add(s.srtt + s.srtt/2 + 10*time.Millisecond); t.Before(deadline) {
					probe = t
				}
			}
			until := deadline
			if !probe.IsZero() {
				until = probe
			}
			f, r, err := s.recvReply(ctx, until, id)
			if err == errTimeout && !probe.IsZero() {
				probed = true
				if err := x.probe(); err != nil {
					return 0, fmt.Errorf("%w: %v", ErrClosed, err)
				}
				continue
			}
			if err == errTimeout {
				timeouts++
				s.Timeouts++
				if timeouts >= s.opt.Retries {
					return 0, ErrLinkDown
				}
				if x.complete() || timeouts%2 == 0 {
					// All held but no done, or the receiver may have
					// lost the transfer (restarted): offer again.
					reoffer = true
					continue
				}
				x.timeout()
				mark = time.Now()
				continue
			}
			// The offer loop above stops at the first ack; this one
			// drives the window (acks advance it, naks resend, timeouts
			// back off).
			if err != nil {
				return 0, err
			}
			done, _, progress := x.answer(f, r)
			switch {
			case done:
				return r.Status, nil
			case progress:
				timeouts, probed = 0, false
				mark = time.Now()
			case f.Type == TNak:
				if r.Offset == 0 && r.Reason != "" {
					// Checksum failed at the end: start over.
					x.restart()
					continue
				}
				x.nak(r.Offset)
			}
		}
	}
	return 0, ErrLinkDown
}

// seg is a data frame sent and not yet held by the receiver.
type seg struct {
	off, n uint32
	seq    uint32    // of its last sending
	at     time.Time // of its last sending
	lost   bool      // to send again
}

// xfer is the sender's state of one transfer.
type xfer struct {
	s     *Sender
	data  []byte
	size  uint32
	sack  bool    // the receiver keeps data beyond a gap
	held  []Range // what the receiver said it holds
	segs  []seg   // sent, not held, in offset order
	next  uint32  // the first offset never sent in this transfer
	offer uint32  // seq of the offer: frames before it are void
}

// reset starts over after an offer: what is held comes with its ack.
func (x *xfer) reset(offerSeq uint32) {
	x.held, x.segs, x.next, x.offer = nil, nil, 0, offerSeq
}

// restart forgets everything the receiver held (it did too).
func (x *xfer) restart() { x.held, x.segs, x.next = nil, nil, 0 }

func (x *xfer) complete() bool {
	return x.size == 0 || len(x.held) == 1 && x.held[0] == Range{0, x.size}
}

// after reports whether seq a was sent after b.
func after(a, b uint32) bool { return int32(a-b) > 0 }

// fill sends frames until a window is in flight: the lost ones first,
// lowest offset first (split to the chunk size now), then new data.
func (x *xfer) fill() error {
	s := x.s
	inflight, bytes := 0, 0
	for _, g := range x.segs {
		if !g.lost {
			inflight++
			bytes += int(g.n)
		}
	}
	for inflight < s.opt.Window && (inflight == 0 || bytes < s.opt.InFlight) {
		i := -1
		for k := range x.segs {
			if x.segs[k].lost {
				i = k
				break
			}
		}
		if i >= 0 {
			g := &x.segs[i]
			if int(g.n) > s.chunk {
				rest := seg{off: g.off + uint32(s.chunk), n: g.n - uint32(s.chunk), lost: true}
				g.n = uint32(s.chunk)
				x.segs = append(x.segs[:i+1], append([]seg{rest}, x.segs[i+1:]...)...)
				g = &x.segs[i]
			}
			seq, err := x.send(g.off, g.n)
			if err != nil {
				return err
			}
			g.seq, g.at, g.lost = seq, time.Now(), false
			s.Resent++
			inflight++
			bytes += int(g.n)
			continue
		}
		// New data, skipping what the receiver already holds.
		limit := x.size
		for _, rg := range x.held {
			if x.next >= rg.Start && x.next < rg.End {
				x.next = rg.End
			}
			if rg.Start > x.next {
				limit = rg.Start
				break
			}
		}
		if x.next >= x.size {
			return nil
		}
		n := min(uint32(s.chunk), limit-x.next)
		seq, err := x.send(x.next, n)
		if err != nil {
			return err
		}
		x.segs = append(x.segs, seg{off: x.next, n: n, seq: seq, at: time.Now()})
		x.next += n
		inflight++
		bytes += int(n)
	}
	return nil
}

// inflight is the data bytes in flight.
func (x *xfer) inflight() int {
	n := 0
	for _, g := range x.segs {
		if !g.lost {
			n += int(g.n)
		}
	}
	return n
}

// last is the frame in flight sent last.
func (x *xfer) last() (seg, bool) {
	var l seg
	found := false
	for _, g := range x.segs {
		if !g.lost && (!found || after(g.seq, l.seq)) {
			l, found = g, true
		}
	}
	return l, found
}

// probe sends the frame in flight sent last again.
func (x *xfer) probe() error {
	l, ok := x.last()
	if !ok {
		return nil
	}
	for i := range x.segs {
		if g := &x.segs[i]; g.seq == l.seq {
			seq, err := x.send(g.off, g.n)
			if err != nil {
				return err
			}
			g.seq, g.at = seq, time.Now()
			x.s.Resent++
		}
	}
	return nil
}

func (x *xfer) send(off, n uint32) (uint32, error) {
	return x.s.c.Send(TData, Data{Xfer: x.offer, Offset: off, Bytes: x.data[off : off+n]}.Encode())
}

// answer takes in a reply about the transfer: done when it is the
// receiver's last word (its status in r.Status), acked when it is an ack
// within the report, taken in, with progress when the receiver holds
// more than before. Other replies change nothing here.
func (x *xfer) answer(f Frame, r Reply) (done, acked, progress bool) {
	switch f.Type {
	case TDone:
		return true, false, false
	case TAck:
		if r.Offset <= x.size {
			return false, true, x.ack(r)
		}
	}
	return false, false, false
}

// ack takes in what an ack says the receiver holds; it reports progress.
func (x *xfer) ack(r Reply) bool {
	s := x.s
	progress := false
	add := func(rg Range) {
		rg.End = min(rg.End, x.size)
		if rg.Start < rg.End && !covered(x.held, rg) {
			x.held = addRange(x.held, rg)
			progress = true
		}
	}
	add(Range{0, r.Offset})
	sk, ok := r.Sack()
	if ok && x.sack {
		for _, rg := range sk.Ranges {
			add(rg)
		}
		// The ack names the frame it answers: a round trip measured
		// without ambiguity, resent or not. (Not an offer's: nothing
		// waits in the line ahead of it, so it says little about data.)
		for _, g := range x.segs {
			if g.seq == sk.Echo && !g.lost {
				s.sample(time.Since(g.at))
			}
		}
	}
	// A full list of ranges may have left out later ones: what lies
	// beyond its end is not known to be lost.
	known := x.size
	if ok && len(sk.Ranges) == MaxSackRanges {
		known = sk.Ranges[MaxSackRanges-1].End
	}
	kept := x.segs[:0]
	for _, g := range x.segs {
		if covered(x.held, Range{g.off, g.off + g.n}) {
			if !g.lost {
				s.outcome(g.n, false)
			}
			continue
		}
		if ok && x.sack && !g.lost && after(sk.Echo, g.seq) && g.off < known {
			// Sent before the frame this ack answers, not held: lost.
			g.lost = true
			s.outcome(g.n, true)
		}
		kept = append(kept, g)
	}
	x.segs = kept
	return progress
}

// nak from a receiver that drops data beyond a gap: everything from the
// offset on is lost.
func (x *xfer) nak(off uint32) {
	if x.sack {
		return // the acks say what is missing
	}
	counted := false
	for i := range x.segs {
		if g := &x.segs[i]; g.off >= off && !g.lost {
			// Only the first was lost to noise; the receiver dropped
			// the rest for coming after it.
			if !counted {
				x.s.outcome(g.n, true)
				counted = true
			}
			g.lost = true
		}
	}
}

// timeout: nothing came for an RTO; every frame in flight is lost. One
// of them counts as noise: frames so long that none gets through must
// shrink (no ack would ever say so), but a cut cable is no reason for
// small frames.
func (x *xfer) timeout() {
	counted := false
	for i := range x.segs {
		g := &x.segs[i]
		if !g.lost && !counted {
			x.s.outcome(g.n, true)
			counted = true
		}
		g.lost = true
	}
}

// covered reports whether rs holds all of r.
func covered(rs []Range, r Range) bool {
	for _, x := range rs {
		if x.Start <= r.Start && r.End <= x.End {
			return true
		}
	}
	return false
}

// addRange merges r into the ordered, disjoint rs.
func addRange(rs []Range, r Range) []Range {
	out := make([]Range, 0, len(rs)+1)
	placed := false
	for _, x := range rs {
		switch {
		case x.End < r.Start:
			out = append(out, x)
		case r.End < x.Start:
			if !placed {
				out, placed = append(out, r), true
			}
			out = append(out, x)
		default:
			r.Start, r.End = min(r.Start, x.Start), max(r.End, x.End)
		}
	}
	if !placed {
		out = append(out, r)
	}
	return out
}

// reply parses f as an ack, nak or done for id.
func (s *Sender) reply(f Frame, id ID) (Reply, bool) {
	if f.Type != TAck && f.Type != TNak && f.Type != TDone {
		return Reply{}, false
	}
	r, err := ParseReply(f.Payload)
	if err != nil || r.ID != id {
		return Reply{}, false
	}
	return r, true
}

// recvReply waits until deadline for the receiver's reply about the
// transfer id, passing over every other frame (stale or foreign replies).
func (s *Sender) recvReply(ctx context.Context, deadline time.Time, id ID) (Frame, Reply, error) {
	for {
		f, err := s.recv(ctx, deadline)
		if err != nil {
			return Frame{}, Reply{}, err
		}
		if r, ok := s.reply(f, id); ok {
			return f, r, nil
		}
	}
}

// Empty tells the receiver the queue is empty (a receiver that is not
// following exits) and waits for its ack, resending up to three times.
// ErrLinkDown when no ack came: harmless, the receiver also has an idle
// timeout.
func (s *Sender) Empty(ctx context.Context) error {
	return s.ask(ctx, 3, TEmpty, nil, func(seq uint32, f Frame) bool {
		r, ok := s.reply(f, ID{})
		return ok && f.Type == TAck && r.Offset == seq
	})
}
