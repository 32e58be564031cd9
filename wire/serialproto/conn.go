package serialproto

import (
	"io"
	"sync"
)

// Conn carries frames over a byte stream. A goroutine reads frames into a
// channel until the stream fails; Write is safe for concurrent use.
type Conn struct {
	w      io.Writer
	rd     *Reader
	frames chan Frame
	mu     sync.Mutex
	seq    uint32
	binary bool  // send in binary framing
	err    error // the read error, once frames is closed

	// Wire counters (bytes written, frames written).
	BytesOut, FramesOut int64
}

// NewConn starts reading frames from rw.
func NewConn(rw io.ReadWriter) *Conn {
	c := &Conn{w: rw, rd: NewReader(rw), frames: make(chan Frame, 64)}
	go c.readLoop()
	return c
}

func (c *Conn) readLoop() {
	for {
		f, err := c.rd.Next()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			close(c.frames)
			return
		}
		c.frames <- f
	}
}

// Frames delivers valid frames; it is closed when reading fails (Err).
func (c *Conn) Frames() <-chan Frame { return c.frames }

// Err is the read error after Frames is closed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Noise returns the counts of skipped and corrupt lines so far (racy,
// for logs).
func (c *Conn) Noise() (noise, corrupt int) { return c.rd.Noise, c.rd.Corrupt }

// LastSeq is the sequence number of the last frame sent.
func (c *Conn) LastSeq() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// Binary reports whether frames are sent in binary framing.
func (c *Conn) Binary() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.binary
}

// SetBinary chooses the framing of the frames sent from now on: binary
// (COBS) or text lines.
func (c *Conn) SetBinary(on bool) {
	c.mu.Lock()
	c.binary = on
	c.mu.Unlock()
}

// Send writes one frame with the next sequence number and returns it.
func (c *Conn) Send(t Type, payload []byte) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	f := Frame{Type: t, Seq: c.seq, Payload: payload}
	var line []byte
	if c.binary {
		line = AppendBinary(nil, f)
	} else {
		line = AppendLine(nil, f)
	}
	err := writeAll(c.w, line)
	c.BytesOut += int64(len(line))
	c.FramesOut++
	return c.seq, err
}

// writeAll loops over short writes (a tty write can return early).
func writeAll(w io.Writer, b []byte) error {
	for len(b) > 0 {
		n, err := w.Write(b)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b = b[n:]
	}
	return nil
}
