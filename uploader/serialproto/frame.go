// Package serialproto is unwound's framing and transfer protocol for a
// serial line (docs/serial-protocol.md): printable, line-oriented frames
// that survive a cooked tty, XON/XOFF and kernel messages on the same UART,
// with a CRC-32 each, a sliding window of data frames, resend on timeout,
// and resume without duplicates (the receiver deduplicates on report ids).
//
// A frame on the wire is one line:
//
//	"#UW1:" base64url(version type seq len payload crc32) "\n"
//
// Anything else on the line before the magic, and every line without it,
// is noise and skipped.
package serialproto

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Magic starts every frame's text.
const Magic = "#UW1:"

// Version is the frame format version (byte 0 of every frame).
const Version = 1

// MaxPayload bounds a frame's payload; a longer frame is invalid.
const MaxPayload = 1100

// headerLen is version, type, seq, len; trailerLen the CRC.
const (
	headerLen  = 1 + 1 + 4 + 2
	trailerLen = 4
)

// MaxLine is the longest valid frame line, magic and '\n' included. It is
// below the 4095 bytes a canonical-mode tty keeps per line.
var MaxLine = len(Magic) + base64.RawURLEncoding.EncodedLen(headerLen+MaxPayload+trailerLen) + 1

// Type is a frame's message type.
type Type uint8

// Message types.
const (
	THello Type = 1 // both ways: version, role, window, chunk size
	TOffer Type = 2 // uploader: report id, size, sha256
	TData  Type = 3 // uploader: transfer, offset, bytes
	TAck   Type = 4 // receiver: report id, bytes held contiguously
	TNak   Type = 5 // receiver: report id, offset expected, reason
	TDone  Type = 6 // receiver: report id, status (stored, duplicate, rejected)
	TEmpty Type = 7 // uploader: the queue is empty; the receiver acks it
)

func (t Type) String() string {
	switch t {
	case THello:
		return "hello"
	case TOffer:
		return "offer"
	case TData:
		return "data"
	case TAck:
		return "ack"
	case TNak:
		return "nak"
	case TDone:
		return "done"
	case TEmpty:
		return "empty"
	}
	return fmt.Sprintf("type%d", uint8(t))
}

// Frame is one decoded frame.
type Frame struct {
	Type    Type
	Seq     uint32
	Payload []byte
}

var enc = base64.RawURLEncoding

// AppendLine appends f's wire form, the trailing '\n' included.
func AppendLine(dst []byte, f Frame) []byte {
	if len(f.Payload) > MaxPayload {
		panic("serialproto: payload too long")
	}
	raw := make([]byte, headerLen, headerLen+len(f.Payload)+trailerLen)
	raw[0] = Version
	raw[1] = byte(f.Type)
	binary.BigEndian.PutUint32(raw[2:], f.Seq)
	binary.BigEndian.PutUint16(raw[6:], uint16(len(f.Payload)))
	raw = append(raw, f.Payload...)
	raw = binary.BigEndian.AppendUint32(raw, crc32.ChecksumIEEE(raw))
	dst = append(dst, Magic...)
	n := len(dst)
	dst = append(dst, make([]byte, enc.EncodedLen(len(raw)))...)
	enc.Encode(dst[n:], raw)
	return append(dst, '\n')
}

// Errors of DecodeLine.
var (
	ErrNoFrame = errors.New("no frame on the line")
	ErrCorrupt = errors.New("corrupt frame")
)

// DecodeLine decodes the frame on one line (with or without its '\n').
// Text before the last magic is ignored (a kernel message that lacked its
// newline); trailing '\r' and spaces are dropped (ONLCR, consoles). A line
// without the magic is ErrNoFrame; a damaged one ErrCorrupt.
func DecodeLine(line []byte) (Frame, error) {
	i := lastIndex(line, Magic)
	if i < 0 {
		return Frame{}, ErrNoFrame
	}
	text := line[i+len(Magic):]
	for len(text) > 0 {
		c := text[len(text)-1]
		if c != '\n' && c != '\r' && c != ' ' {
			break
		}
		text = text[:len(text)-1]
	}
	if enc.DecodedLen(len(text)) > headerLen+MaxPayload+trailerLen {
		return Frame{}, fmt.Errorf("%w: %d characters", ErrCorrupt, len(text))
	}
	raw := make([]byte, enc.DecodedLen(len(text)))
	n, err := enc.Decode(raw, text)
	if err != nil {
		return Frame{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	raw = raw[:n]
	if len(raw) < headerLen+trailerLen {
		return Frame{}, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(raw))
	}
	if raw[0] != Version {
		return Frame{}, fmt.Errorf("%w: version %d", ErrCorrupt, raw[0])
	}
	plen := int(binary.BigEndian.Uint16(raw[6:]))
	if plen > MaxPayload || headerLen+plen+trailerLen != len(raw) {
		return Frame{}, fmt.Errorf("%w: length %d in a %d-byte frame", ErrCorrupt, plen, len(raw))
	}
	body := raw[:headerLen+plen]
	if crc32.ChecksumIEEE(body) != binary.BigEndian.Uint32(raw[headerLen+plen:]) {
		return Frame{}, fmt.Errorf("%w: CRC mismatch", ErrCorrupt)
	}
	return Frame{
		Type:    Type(raw[1]),
		Seq:     binary.BigEndian.Uint32(raw[2:]),
		Payload: raw[headerLen : headerLen+plen : headerLen+plen],
	}, nil
}

func lastIndex(b []byte, s string) int {
	for i := len(b) - len(s); i >= 0; i-- {
		if string(b[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}

// Reader splits a byte stream into frames, skipping noise.
type Reader struct {
	br *bufio.Reader
	// Counters, for logs and tests.
	Noise   int // lines without a frame
	Corrupt int // lines with a damaged frame
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 4096)}
}

// Next returns the next valid frame. Lines longer than MaxLine are dropped
// whole. It returns only r's errors.
func (r *Reader) Next() (Frame, error) {
	var line []byte
	long := false
	for {
		chunk, err := r.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = true
			line = line[:0]
			continue
		}
		if !long && len(line)+len(chunk) <= MaxLine+2 {
			line = append(line, chunk...)
		} else {
			long = true
		}
		if err != nil {
			return Frame{}, err
		}
		if long {
			r.Noise++
			long, line = false, line[:0]
			continue
		}
		f, derr := DecodeLine(line)
		line = line[:0]
		switch {
		case derr == nil:
			return f, nil
		case errors.Is(derr, ErrNoFrame):
			r.Noise++
		default:
			r.Corrupt++
		}
	}
}
