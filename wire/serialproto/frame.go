// Package serialproto is unwound's framing and transfer protocol for a
// serial line (docs/serial-protocol.md): frames with a CRC-32 each, a
// sliding window of data frames whose size follows the line's error rate,
// selective resend of lost ones, and resume without duplicates (the
// receiver deduplicates on report ids).
//
// A frame has two wire forms. Text, for a UART shared with a console
// (printable, survives a cooked tty, XON/XOFF and kernel messages), is one
// line:
//
//	"#UW1:" base64url(version type seq len payload crc32) "\n"
//
// Binary, for a dedicated UART, is the same bytes COBS-encoded between
// zero bytes:
//
//	0x00 cobs(version type seq len payload crc32) 0x00
//
// A Reader takes both from the same stream; anything else is noise.
package serialproto

import (
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

var typeNames = [...]string{THello: "hello", TOffer: "offer", TData: "data", TAck: "ack", TNak: "nak", TDone: "done", TEmpty: "empty"}

func (t Type) String() string { return name(typeNames[:], uint8(t), "type") }

// name is v's name, or the prefix and the number for a value without one
// (a newer peer's).
func name(names []string, v uint8, prefix string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s%d", prefix, v)
}

// Frame is one decoded frame.
type Frame struct {
	Type    Type
	Seq     uint32
	Payload []byte
	Binary  bool // it came in binary framing (set by the decoders)
}

var enc = base64.RawURLEncoding

// appendRaw appends f's bytes before either framing: header, payload, CRC.
func appendRaw(dst []byte, f Frame) []byte {
	if len(f.Payload) > MaxPayload {
		panic("serialproto: payload too long")
	}
	n := len(dst)
	dst = append(dst, Version, byte(f.Type))
	dst = binary.BigEndian.AppendUint32(dst, f.Seq)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(f.Payload)))
	dst = append(dst, f.Payload...)
	return binary.BigEndian.AppendUint32(dst, crc32.ChecksumIEEE(dst[n:]))
}

// AppendLine appends f's text wire form, the trailing '\n' included.
func AppendLine(dst []byte, f Frame) []byte {
	raw := appendRaw(nil, f)
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
	return decodeRaw(raw[:n])
}

// decodeRaw checks and splits a frame's bytes; the payload aliases raw.
func decodeRaw(raw []byte) (Frame, error) {
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

// maxRaw is the longest frame before framing; maxCOBS its longest COBS
// form (one code byte per 254 data bytes, and one more).
const (
	maxRaw  = headerLen + MaxPayload + trailerLen
	maxCOBS = maxRaw + maxRaw/254 + 1
)

// AppendBinary appends f's binary wire form: a zero byte, the COBS
// encoding of the frame, a zero byte. The leading zero ends whatever came
// before (noise, a cut frame), so it cannot spoil this one.
func AppendBinary(dst []byte, f Frame) []byte {
	dst = append(dst, 0)
	dst = appendCOBS(dst, appendRaw(nil, f))
	return append(dst, 0)
}

// appendCOBS appends the Consistent Overhead Byte Stuffing of src: every
// zero byte is replaced by the distance to the next one, so the encoding
// has no zeros and a zero byte can delimit frames.
func appendCOBS(dst, src []byte) []byte {
	code := len(dst)
	dst = append(dst, 0)
	run := byte(1)
	for _, c := range src {
		if c == 0 {
			dst[code] = run
			code, run = len(dst), 1
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, c)
		run++
		if run == 0xff {
			dst[code] = run
			code, run = len(dst), 1
			dst = append(dst, 0)
		}
	}
	dst[code] = run
	return dst
}

// decodeCOBS reverses appendCOBS on src (no zero bytes, no delimiters).
func decodeCOBS(dst, src []byte) ([]byte, error) {
	for i := 0; i < len(src); {
		code := int(src[i])
		end := i + code
		if code == 0 || end > len(src) {
			return nil, errors.New("bad COBS code")
		}
		dst = append(dst, src[i+1:end]...)
		i = end
		if code != 0xff && i < len(src) {
			dst = append(dst, 0)
		}
	}
	return dst, nil
}

// DecodeBinary decodes one binary frame given without its zero delimiters.
func DecodeBinary(b []byte) (Frame, error) {
	if len(b) > maxCOBS {
		return Frame{}, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	raw, err := decodeCOBS(make([]byte, 0, len(b)), b)
	if err != nil {
		return Frame{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	f, err := decodeRaw(raw)
	f.Binary = err == nil
	return f, err
}

// Reader splits a byte stream into frames of either framing, skipping
// noise.
type Reader struct {
	r        io.Reader
	buf      []byte
	pos, end int
	line     []byte // since the last '\n' or zero byte: a text frame?
	bin      []byte // since the last zero byte: a binary frame?
	lineLong bool
	binLong  bool
	// Counters, for logs and tests.
	Noise   int // printable lines without a frame
	Corrupt int // damaged frames, of either framing
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: r, buf: make([]byte, 4096)}
}

// Next returns the next valid frame. Text lines longer than MaxLine and
// binary frames longer than the longest valid one are dropped whole. It
// returns only r's errors.
func (r *Reader) Next() (Frame, error) {
	for {
		for r.pos < r.end {
			c := r.buf[r.pos]
			r.pos++
			switch c {
			case 0:
				bin, long := r.bin, r.binLong
				r.bin, r.binLong = r.bin[:0], false
				r.line, r.lineLong = r.line[:0], false
				if len(bin) == 0 {
					continue
				}
				if long {
					r.Corrupt++
					continue
				}
				f, err := DecodeBinary(bin)
				if err != nil {
					r.Corrupt++
					continue
				}
				return f, nil
			case '\n':
				r.bin, r.binLong = appendMax(r.bin, c, maxCOBS, r.binLong)
				line, long := r.line, r.lineLong
				r.line, r.lineLong = r.line[:0], false
				if long {
					r.Noise++
					continue
				}
				f, err := DecodeLine(line)
				switch {
				case err == nil:
					r.bin, r.binLong = r.bin[:0], false
					return f, nil
				case !errors.Is(err, ErrNoFrame):
					r.Corrupt++
				case printable(line):
					r.Noise++
				}
			default:
				r.bin, r.binLong = appendMax(r.bin, c, maxCOBS, r.binLong)
				r.line, r.lineLong = appendMax(r.line, c, MaxLine+2, r.lineLong)
			}
		}
		n, err := r.r.Read(r.buf)
		if n == 0 && err != nil {
			return Frame{}, err
		}
		r.pos, r.end = 0, n
	}
}

// appendMax appends c to b unless b is full (or was), and says whether it
// overflowed.
func appendMax(b []byte, c byte, max int, long bool) ([]byte, bool) {
	if long || len(b) >= max {
		return b[:0], true
	}
	return append(b, c), false
}

// printable reports whether a line is text (a kernel message, a prompt),
// not a piece of a binary frame: counted as noise only then.
func printable(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if (c < 0x20 || c >= 0x7f) && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}
