// Package serialup is the uploader's serial transport: go.bug.st/serial in
// raw mode (no echo, no line discipline, no XON/XOFF), optional RTS/CTS,
// and the serialproto protocol. It does not import net/http.
package serialup

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"go.bug.st/serial"

	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/wire/serialport"
	"github.com/unwound-dev/unwound/wire/serialproto"
)

// Config of the transport.
type Config struct {
	Port  string
	Baud  int
	Flow  string
	Proto serialproto.Options
	Log   func(format string, args ...any)
	// Announce opens the link to say the queue is empty even when nothing
	// was sent (--once: a host waiting in `unwound receive` learns there
	// is nothing to pull). Without it only an open link is told.
	Announce bool
}

// Transport sends reports over a serial port. The port is opened on the
// first Send and after any failure (a cut link, a reset receiver).
type Transport struct {
	cfg  Config
	port serial.Port
	conn *serialproto.Conn
	snd  *serialproto.Sender
}

// New returns a transport; nothing is opened yet.
func New(cfg Config) *Transport {
	if cfg.Proto.Baud == 0 {
		cfg.Proto.Baud = cfg.Baud
	}
	return &Transport{cfg: cfg}
}

func (t *Transport) logf(format string, args ...any) {
	if t.cfg.Log != nil {
		t.cfg.Log(format, args...)
	}
}

func (t *Transport) connect(ctx context.Context) error {
	p, err := serialport.Open(t.cfg.Port, t.cfg.Baud, t.cfg.Flow)
	if err != nil {
		return err
	}
	t.port = p
	t.conn = serialproto.NewConn(p)
	t.snd = serialproto.NewSender(t.conn, t.cfg.Proto)
	if err := t.snd.Handshake(ctx); err != nil {
		t.Close()
		return fmt.Errorf("%s: %w", t.cfg.Port, err)
	}
	peer := t.snd.Peer()
	framing := "text"
	if t.conn.Binary() {
		framing = "binary"
	}
	t.logf("%s: receiver %q answered (window %d, chunk %d, %s framing)", t.cfg.Port, peer.Name, peer.Window, peer.Chunk, framing)
	return nil
}

// Send implements uploader.Transport.
func (t *Transport) Send(ctx context.Context, it uploader.Item) (uploader.Result, error) {
	var id serialproto.ID
	if b, err := hex.DecodeString(it.ID); err != nil || len(b) != len(id) {
		return uploader.Result{Outcome: uploader.Rejected, Reason: "report id is not 32 hex digits"}, nil
	}
	hex.Decode(id[:], []byte(it.ID))
	if t.snd == nil {
		if err := t.connect(ctx); err != nil {
			return uploader.Result{}, err
		}
	}
	st, err := t.snd.Send(ctx, id, it.Data)
	if err != nil {
		t.Close() // reopen next time: a cut link, a receiver restarted
		return uploader.Result{}, err
	}
	if t.snd.Resent > 0 || t.snd.Timeouts > 0 {
		t.logf("%s: %d data frames resent, %d timeouts, chunk now %d bytes", it.Name, t.snd.Resent, t.snd.Timeouts, t.snd.Chunks)
	}
	switch st {
	case serialproto.Stored:
		return uploader.Result{Outcome: uploader.Delivered}, nil
	case serialproto.Duplicate:
		return uploader.Result{Outcome: uploader.Duplicate}, nil
	case serialproto.Rejected:
		return uploader.Result{Outcome: uploader.Rejected, Reason: "receiver rejected the report"}, nil
	}
	return uploader.Result{}, errors.New("receiver sent an unknown status")
}

// QueueEmpty implements uploader.EmptyNotifier.
func (t *Transport) QueueEmpty(ctx context.Context) error {
	if t.snd == nil {
		if !t.cfg.Announce {
			return nil
		}
		if err := t.connect(ctx); err != nil {
			return err
		}
	}
	if err := t.snd.Empty(ctx); err != nil {
		t.Close()
		return err
	}
	return nil
}

// Close closes the port.
func (t *Transport) Close() error {
	var err error
	if t.port != nil {
		err = t.port.Close()
	}
	t.port, t.conn, t.snd = nil, nil, nil
	return err
}
