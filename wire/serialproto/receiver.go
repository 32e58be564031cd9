package serialproto

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/unwound-dev/unwound/internal/sha256"
)

// Store is what a Receiver does with reports.
type Store interface {
	// Has reports whether the report is already stored.
	Has(id ID) bool
	// Put stores a complete, checksummed report durably; it returns
	// Stored, or Rejected with a reason (invalid report). An error is a
	// local failure (disk full): the uploader will offer again.
	Put(id ID, data []byte) (Status, string, error)
}

// ReceiverOptions tune a Receiver.
type ReceiverOptions struct {
	Window  int    // advertised (default 32)
	Chunk   int    // advertised (default MaxChunk)
	MaxSize uint32 // largest report accepted (default 16 MiB)
	Name    string // sent in the hello
	// Count stops Serve after this many reports were stored (0: never).
	Count int
	// Idle stops Serve after this long without a valid frame (0: never).
	Idle time.Duration
	// Follow keeps serving after the uploader said its queue is empty;
	// without it Serve returns ErrEmpty then.
	Follow bool
	// Log, when set, receives one line per event.
	Log func(format string, args ...any)
}

// Receiver is the host's end: it answers hellos, offers and data.
type Receiver struct {
	c     *Conn
	st    Store
	opt   ReceiverOptions
	parts map[ID]*partial
	cur   *partial // the transfer data frames belong to
	empty bool     // the last frame said the uploader's queue is empty
	sack  bool     // the uploader's hello asked for selective acks: no naks
	// An ack held back: acks to a selective-ack uploader go out once
	// ackBytes of data came or ackDelay passed, whichever is first, so
	// that small frames on a noisy line do not fill the way back.
	pending      *partial
	pendingSeq   uint32
	pendingBytes int
	pendingT     *time.Timer
	// Stored counts reports stored by this receiver; Dups the offers of
	// reports it already had.
	Stored, Dups int
	// Again counts data frames that brought nothing new (resent, but
	// the first had arrived).
	Again int
}

type partial struct {
	offer   Offer
	xfer    uint32
	buf     []byte  // offer.Size bytes
	have    []Range // the bytes of buf received, in order, merged
	lastNak uint32
	naked   bool
}

// maxRanges bounds the ranges a partial transfer holds: data that would
// open one more is dropped (the uploader resends it).
const maxRanges = 64

// held is the count of bytes held contiguously from offset 0.
func (p *partial) held() uint32 {
	if len(p.have) > 0 && p.have[0].Start == 0 {
		return p.have[0].End
	}
	return 0
}

// add copies b in at off and records it; false when it would open too
// many ranges (unless force).
func (p *partial) add(off uint32, b []byte, force bool) bool {
	out := addRange(p.have, Range{off, off + uint32(len(b))})
	if len(out) > maxRanges && !force {
		return false
	}
	copy(p.buf[off:], b)
	p.have = out
	return true
}

// ack is the ack for p after the frame seq: the contiguous offset and
// the ranges held beyond it.
func (p *partial) ack(seq uint32) Reply {
	held := p.held()
	s := Sack{Echo: seq}
	for _, rg := range p.have {
		if rg.Start > held {
			s.Ranges = append(s.Ranges, rg)
		}
	}
	return Reply{ID: p.offer.ID, Offset: held}.WithSack(s)
}

// NewReceiver answers on c and keeps reports in st.
func NewReceiver(c *Conn, st Store, opt ReceiverOptions) *Receiver {
	if opt.Window <= 0 {
		opt.Window = 32
	}
	if opt.Chunk <= 0 || opt.Chunk > MaxChunk {
		opt.Chunk = MaxChunk
	}
	if opt.MaxSize == 0 {
		opt.MaxSize = 16 << 20
	}
	if opt.Log == nil {
		opt.Log = func(string, ...any) {}
	}
	return &Receiver{c: c, st: st, opt: opt, parts: map[ID]*partial{}}
}

// ErrIdle is returned by Serve when Idle passed without a frame.
var ErrIdle = errors.New("idle timeout")

// ErrEmpty is returned by Serve when the uploader said its queue is empty
// (and Follow is off).
var ErrEmpty = errors.New("the board's queue is empty")

// Use makes the receiver answer on c from now on (the port was reopened);
// partial transfers are kept, so the uploader resumes them.
func (r *Receiver) Use(c *Conn) { r.c = c }

// Serve answers until ctx ends, the stream fails, Count reports were
// stored (nil), Idle passed (ErrIdle) or the uploader's queue is empty
// (ErrEmpty, unless Follow).
func (r *Receiver) Serve(ctx context.Context) error {
	var idle <-chan time.Time
	var t *time.Timer
	if r.opt.Idle > 0 {
		t = time.NewTimer(r.opt.Idle)
		defer t.Stop()
		idle = t.C
	}
	for {
		var flush <-chan time.Time
		if r.pending != nil {
			flush = r.pendingT.C
		}
		select {
		case <-flush:
			r.pendingT = nil
			if err := r.flush(); err != nil {
				return err
			}
		case f, ok := <-r.c.Frames():
			if !ok {
				return r.c.Err()
			}
			if t != nil {
				if !t.Stop() {
					<-t.C
				}
				t.Reset(r.opt.Idle)
			}
			if err := r.handle(f); err != nil {
				return err
			}
			if r.empty && !r.opt.Follow {
				return ErrEmpty
			}
			r.empty = false
			if r.opt.Count > 0 && r.Stored >= r.opt.Count {
				return nil
			}
		case <-idle:
			return ErrIdle
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Ack pacing (see Receiver.pending).
const (
	ackBytes = 1024
	ackDelay = 30 * time.Millisecond
)

// ackLater acks p after data frame seq of n bytes, now or soon.
func (r *Receiver) ackLater(p *partial, seq uint32, n int) error {
	if !r.sack {
		return r.reply(TAck, p.ack(seq))
	}
	if r.pending != p {
		r.pendingBytes = 0
	}
	r.pending, r.pendingSeq = p, seq
	r.pendingBytes += n
	if r.pendingBytes >= ackBytes {
		return r.flush()
	}
	if r.pendingT == nil {
		r.pendingT = time.NewTimer(ackDelay)
	}
	return nil
}

// flush sends the ack held back, if any.
func (r *Receiver) flush() error {
	p := r.pending
	if r.pendingT != nil {
		r.pendingT.Stop()
		r.pendingT = nil
	}
	r.pending, r.pendingBytes = nil, 0
	if p == nil {
		return nil
	}
	return r.reply(TAck, p.ack(r.pendingSeq))
}

// replyTwice sends the answers that end a wait on the uploader's side
// (the ack of an offer, a done) twice to a selective-ack uploader: on a
// noisy line one of them is lost often, and each loss costs a timeout.
// The uploader takes the first and ignores the second.
func (r *Receiver) replyTwice(t Type, rp Reply) error {
	if err := r.reply(t, rp); err != nil || !r.sack {
		return err
	}
	return r.reply(t, rp)
}

func (r *Receiver) reply(t Type, rp Reply) error {
	_, err := r.c.Send(t, rp.Encode())
	return err
}

func (r *Receiver) handle(f Frame) error {
	// Answer in the framing the frame came in: an uploader switches to
	// binary after its hello, and one that restarted starts in text.
	r.c.SetBinary(f.Binary)
	if f.Type != TData {
		// Whatever comes next answers this frame; an ack held back
		// for data would only be stale.
		r.pending = nil
		if r.pendingT != nil {
			r.pendingT.Stop()
			r.pendingT = nil
		}
	}
	switch f.Type {
	case THello:
		h, err := ParseHello(f.Payload)
		if err != nil || h.Role != RoleUploader {
			return nil // our own echo, or garbage
		}
		r.sack = h.Flags&FlagSack != 0
		flags := uint8(FlagSack) | h.Flags&FlagBinary
		framing := "text"
		if flags&FlagBinary != 0 {
			framing = "binary"
		}
		r.opt.Log("hello from %q (window %d, chunk %d, %s framing)", h.Name, h.Window, h.Chunk, framing)
		_, err = r.c.Send(THello, Hello{Role: RoleReceiver, Flags: flags, Window: uint8(r.opt.Window), Chunk: uint16(r.opt.Chunk), Echo: f.Seq, Name: r.opt.Name}.Encode())
		return err
	case TEmpty:
		r.empty = true
		r.opt.Log("the board's queue is empty (%d reports stored here)", r.Stored)
		// The ack names the empty frame's seq (id zero).
		return r.reply(TAck, Reply{Offset: f.Seq})
	case TOffer:
		o, err := ParseOffer(f.Payload)
		if err != nil {
			return nil
		}
		if r.st.Has(o.ID) {
			r.Dups++
			delete(r.parts, o.ID)
			r.opt.Log("offer %v: duplicate", o.ID)
			return r.reply(TDone, Reply{ID: o.ID, Offset: o.Size, Status: Duplicate})
		}
		if o.Size > r.opt.MaxSize {
			r.opt.Log("offer %v: %d bytes, too large", o.ID, o.Size)
			return r.reply(TDone, Reply{ID: o.ID, Status: Rejected, Reason: "report too large"})
		}
		p := r.parts[o.ID]
		if p == nil || p.offer != o {
			p = &partial{offer: o, buf: make([]byte, o.Size)}
			r.parts[o.ID] = p
		}
		p.xfer, p.naked = f.Seq, false
		r.cur = p
		r.opt.Log("offer %v: %d bytes, have %d", o.ID, o.Size, p.held())
		if p.held() == o.Size {
			return r.complete(p)
		}
		return r.replyTwice(TAck, p.ack(f.Seq))
	case TData:
		d, err := ParseData(f.Payload)
		p := r.cur
		if err != nil || p == nil || d.Xfer != p.xfer {
			return nil // stale: from an earlier offer
		}
		if uint64(d.Offset)+uint64(len(d.Bytes)) > uint64(p.offer.Size) || len(d.Bytes) == 0 {
			return nil
		}
		if covered(p.have, Range{d.Offset, d.Offset + uint32(len(d.Bytes))}) {
			r.Again++
		}
		before := p.held()
		// Data beyond a gap is kept unless the transfer is too
		// fragmented (then the uploader resends it); data at the front
		// is always taken.
		if !p.add(d.Offset, d.Bytes, d.Offset <= before) {
			return nil
		}
		held := p.held()
		if held == p.offer.Size {
			r.pending = nil
			return r.complete(p)
		}
		if held > before {
			p.naked = false
		}
		if err := r.ackLater(p, f.Seq, len(d.Bytes)); err != nil {
			return err
		}
		if d.Offset > held && !r.sack && !(p.naked && p.lastNak == held) {
			// A gap, to an uploader that goes back on a nak: one per
			// offset.
			p.naked, p.lastNak = true, held
			return r.reply(TNak, Reply{ID: p.offer.ID, Offset: held})
		}
		return nil
	}
	return nil
}

func (r *Receiver) complete(p *partial) error {
	id := p.offer.ID
	sum := sha256.Sum256(p.buf)
	if !bytes.Equal(sum[:], p.offer.SHA256[:]) {
		r.opt.Log("report %v: sha256 mismatch, starting over", id)
		p.have = nil
		return r.reply(TNak, Reply{ID: id, Offset: 0, Reason: "sha256 mismatch"})
	}
	status, reason, err := r.st.Put(id, p.buf)
	if err != nil {
		// Keep the bytes: the uploader offers again and we retry.
		r.opt.Log("report %v: storing: %v", id, err)
		return nil
	}
	delete(r.parts, id)
	if r.cur == p {
		r.cur = nil
	}
	if status == Stored {
		r.Stored++
	}
	r.opt.Log("report %v: %v %s", id, status, reason)
	return r.replyTwice(TDone, Reply{ID: id, Offset: p.offer.Size, Status: status, Reason: reason})
}
