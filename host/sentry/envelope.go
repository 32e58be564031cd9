package sentry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Envelope framing, as Sentry's developer documentation ("Envelopes")
// describes it:
//
//	Envelope = Headers { "\n" Item } [ "\n" ]
//	Item     = Headers "\n" Payload
//	Payload  = { * }
//
// Headers are one line of JSON, an object. An item header's "type" is
// required; with "length" the payload is exactly that many bytes
// (newlines included) and may be followed by a "\n"; without it, the
// payload runs to the next "\n" or the end.

// EnvelopeContentType is the envelope endpoint's request content type.
const EnvelopeContentType = "application/x-sentry-envelope"

// NewEnvelope frames one event: the envelope header names the event, the
// DSN and the sending time; one item of type "event" with its length.
func NewEnvelope(dsn *DSN, eventID string, payload []byte, sentAt time.Time) []byte {
	h, _ := json.Marshal(map[string]string{
		"event_id": eventID,
		"dsn":      dsn.String(),
		"sent_at":  sentAt.UTC().Format(time.RFC3339Nano),
	})
	ih, _ := json.Marshal(map[string]any{
		"type":         "event",
		"length":       len(payload),
		"content_type": "application/json",
	})
	var b bytes.Buffer
	b.Grow(len(h) + len(ih) + len(payload) + 3)
	b.Write(h)
	b.WriteByte('\n')
	b.Write(ih)
	b.WriteByte('\n')
	b.Write(payload)
	b.WriteByte('\n')
	return b.Bytes()
}

// Envelope is a parsed envelope.
type Envelope struct {
	Header map[string]any
	Items  []Item
}

// Item is one envelope item.
type Item struct {
	Header  map[string]any
	Type    string
	Payload []byte
}

// EnvelopeError says where an envelope is malformed.
type EnvelopeError struct {
	Off int // byte offset
	Msg string
}

func (e *EnvelopeError) Error() string { return fmt.Sprintf("envelope: at byte %d: %s", e.Off, e.Msg) }

// ParseEnvelope parses an envelope's framing. It checks the framing only:
// the headers are JSON objects, every item has a type, every length is
// honoured. Payloads are returned as they are.
func ParseEnvelope(b []byte) (*Envelope, error) {
	line, off, err := headerLine(b, 0)
	if err != nil {
		return nil, err
	}
	env := &Envelope{}
	if env.Header, err = object(line, 0); err != nil {
		return nil, err
	}
	for off < len(b) {
		start := off
		line, next, err := headerLine(b, off)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 && next >= len(b) {
			break // the optional newline at the end, as a last empty line
		}
		h, err := object(line, start)
		if err != nil {
			return nil, err
		}
		it := Item{Header: h}
		t, ok := h["type"].(string)
		if !ok || t == "" {
			return nil, &EnvelopeError{start, "item header without a type"}
		}
		it.Type = t
		off = next
		if lv, ok := h["length"]; ok && lv != nil {
			n, ok := lv.(float64)
			if !ok || n < 0 || n != math.Trunc(n) || n > float64(len(b)) {
				return nil, &EnvelopeError{start, fmt.Sprintf("item length %v: want a whole number of bytes", lv)}
			}
			if off+int(n) > len(b) {
				return nil, &EnvelopeError{off, fmt.Sprintf("item of %d bytes, %d left", int(n), len(b)-off)}
			}
			it.Payload = b[off : off+int(n)]
			off += int(n)
			if off < len(b) {
				if b[off] != '\n' {
					return nil, &EnvelopeError{off, "item payload not followed by a newline"}
				}
				off++
			}
		} else {
			end := bytes.IndexByte(b[off:], '\n')
			if end < 0 {
				it.Payload, off = b[off:], len(b)
			} else {
				it.Payload, off = b[off:off+end], off+end+1
			}
		}
		env.Items = append(env.Items, it)
	}
	return env, nil
}

// headerLine returns the line at off and where the next one starts.
func headerLine(b []byte, off int) (line []byte, next int, err error) {
	if off > len(b) {
		return nil, off, &EnvelopeError{off, "truncated"}
	}
	i := bytes.IndexByte(b[off:], '\n')
	if i < 0 {
		return b[off:], len(b), nil
	}
	return b[off : off+i], off + i + 1, nil
}

func object(line []byte, off int) (map[string]any, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, &EnvelopeError{off, "empty header line"}
	}
	var h map[string]any
	d := json.NewDecoder(bytes.NewReader(line))
	if err := d.Decode(&h); err != nil {
		return nil, &EnvelopeError{off, "header: " + err.Error()}
	}
	if h == nil {
		return nil, &EnvelopeError{off, "header is not a JSON object"}
	}
	if d.More() {
		return nil, &EnvelopeError{off, "header: more than one JSON value on the line"}
	}
	return h, nil
}

var errNoEvent = errors.New("envelope has no event item")

// Event returns the payload of the envelope's event item.
func (e *Envelope) Event() ([]byte, error) {
	for _, it := range e.Items {
		if it.Type == "event" {
			return it.Payload, nil
		}
	}
	return nil, errNoEvent
}
