package serialproto

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// Options tune a Sender. Zero values take the defaults.
type Options struct {
	Window  int           // data frames in flight (default 8, max 64)
	Chunk   int           // data bytes per frame (default 512, max MaxPayload-8)
	RTO     time.Duration // wait for a reply before resending (default from Baud)
	Baud    int           // line speed, to size the default RTO (default 115200)
	Retries int           // timeouts in a row without progress before giving up (default 8)
	Name    string        // sent in the hello (the device id)
}

func (o *Options) defaults() {
	if o.Window <= 0 {
		o.Window = 8
	}
	if o.Window > 64 {
		o.Window = 64
	}
	if o.Chunk <= 0 {
		o.Chunk = 512
	}
	if o.Chunk > MaxPayload-8 {
		o.Chunk = MaxPayload - 8
	}
	if o.Baud <= 0 {
		o.Baud = 115200
	}
	if o.RTO <= 0 {
		// One second plus the time a whole window and its acks take on
		// the line (10 bits per byte, base64 is 4/3).
		line := time.Duration(o.Window*(o.Chunk+40)*4/3) * time.Second / time.Duration(o.Baud/10)
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

	// Stats of the last Send, for logs and tests.
	Resent int // data frames sent again
}

// NewSender uses c with opt.
func NewSender(c *Conn, opt Options) *Sender {
	opt.defaults()
	return &Sender{c: c, opt: opt}
}

// Peer is the receiver's hello, after Handshake.
func (s *Sender) Peer() Hello { return s.peer }

// Handshake sends hellos until the receiver answers one, and adopts the
// smaller window and chunk.
func (s *Sender) Handshake(ctx context.Context) error {
	hello := Hello{Role: RoleUploader, Window: uint8(s.opt.Window), Chunk: uint16(s.opt.Chunk), Name: s.opt.Name}.Encode()
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
		deadline := time.Now().Add(s.opt.RTO)
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
	s.Resent = 0
	offer := Offer{ID: id, Size: uint32(len(data)), SHA256: sha256.Sum256(data)}
	size := uint32(len(data))
	timeouts := 0
	for timeouts < s.opt.Retries {
		// Offer, and learn how much the receiver already holds.
		xfer, err := s.c.Send(TOffer, offer.Encode())
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrClosed, err)
		}
		var base uint32
		got := false
		deadline := time.Now().Add(s.opt.RTO)
		for !got {
			f, err := s.recv(ctx, deadline)
			if err == errTimeout {
				break
			}
			if err != nil {
				return 0, err
			}
			r, ok := s.reply(f, id)
			if !ok {
				continue
			}
			switch f.Type {
			case TDone:
				return r.Status, nil
			case TAck:
				if r.Offset <= size {
					base, got = r.Offset, true
				}
			}
		}
		if !got {
			timeouts++
			continue
		}
		timeouts = 0
		// Data, a window at a time; acks are cumulative.
		next := base
		sentMax := base
		deadline = time.Now().Add(s.opt.RTO)
		reoffer := false
		for !reoffer {
			for next < size && next-base < uint32(s.opt.Window*s.opt.Chunk) {
				n := uint32(s.opt.Chunk)
				if size-next < n {
					n = size - next
				}
				if next < sentMax {
					s.Resent++
				}
				if _, err := s.c.Send(TData, Data{Xfer: xfer, Offset: next, Bytes: data[next : next+n]}.Encode()); err != nil {
					return 0, fmt.Errorf("%w: %v", ErrClosed, err)
				}
				next += n
				if next > sentMax {
					sentMax = next
				}
			}
			f, err := s.recv(ctx, deadline)
			if err == errTimeout {
				timeouts++
				if timeouts >= s.opt.Retries {
					return 0, ErrLinkDown
				}
				if base == size || timeouts%2 == 0 {
					// All sent but no done, or the receiver may have
					// lost the transfer (restarted): offer again.
					reoffer = true
					continue
				}
				next = base // go back
				deadline = time.Now().Add(s.opt.RTO)
				continue
			}
			if err != nil {
				return 0, err
			}
			r, ok := s.reply(f, id)
			if !ok {
				continue
			}
			switch f.Type {
			case TDone:
				return r.Status, nil
			case TAck:
				if r.Offset > base && r.Offset <= size {
					base = r.Offset
					timeouts = 0
					deadline = time.Now().Add(s.opt.RTO)
				}
				if next < base {
					next = base
				}
			case TNak:
				if r.Offset == 0 && r.Reason != "" && base > 0 {
					// Checksum failed at the end: start over.
					base, next = 0, 0
					continue
				}
				if r.Offset >= base && r.Offset < next {
					next = r.Offset
				}
			}
		}
	}
	return 0, ErrLinkDown
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
