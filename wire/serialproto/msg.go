package serialproto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ID is a report id: the 32 hex digits of report.ID as 16 bytes.
type ID [16]byte

func (id ID) String() string { return fmt.Sprintf("%x", id[:]) }

// Roles in a hello.
const (
	RoleUploader = 1
	RoleReceiver = 2
)

// Status in a done.
type Status uint8

// Done statuses.
const (
	Stored    Status = 1 // the receiver stored the report now
	Duplicate Status = 2 // it already had it
	Rejected  Status = 3 // it never will (invalid report, too large): quarantine
)

var statusNames = [...]string{Stored: "stored", Duplicate: "duplicate", Rejected: "rejected"}

func (s Status) String() string { return name(statusNames[:], uint8(s), "status") }

var errShort = errors.New("short payload")

// Hello flags: what the sender of a hello can do (uploader) or agrees to
// (receiver). A peer that predates them sends 0.
const (
	// FlagBinary: binary framing. An uploader configured for it asks; a
	// receiver that reads it answers with the flag, and the uploader
	// switches after the hello.
	FlagBinary = 1 << 0
	// FlagSack: the receiver keeps data beyond a gap and its acks carry
	// the ranges it holds (selective acks); the uploader resends only
	// what is missing.
	FlagSack = 1 << 1
)

// Hello opens a session (uploader) and answers it (receiver).
type Hello struct {
	Role   uint8
	Flags  uint8
	Window uint8  // data frames in flight the sender may have / the receiver accepts
	Chunk  uint16 // data bytes per frame
	Echo   uint32 // in an answer: the seq of the hello answered
	Name   string // device id (uploader) or host name (receiver), ≤ 64 bytes
}

// Encode returns h's payload.
func (h Hello) Encode() []byte {
	name := h.Name
	if len(name) > 64 {
		name = name[:64]
	}
	b := []byte{Version, h.Role, h.Window, h.Flags}
	b = binary.BigEndian.AppendUint16(b, h.Chunk)
	b = binary.BigEndian.AppendUint32(b, h.Echo)
	return append(b, name...)
}

// ParseHello decodes a hello payload.
func ParseHello(p []byte) (Hello, error) {
	if len(p) < 10 || len(p) > 10+64 {
		return Hello{}, errShort
	}
	return Hello{Role: p[1], Window: p[2], Flags: p[3], Chunk: binary.BigEndian.Uint16(p[4:]),
		Echo: binary.BigEndian.Uint32(p[6:]), Name: string(p[10:])}, nil
}

// Offer announces a report.
type Offer struct {
	ID     ID
	Size   uint32
	SHA256 [32]byte
}

// Encode returns o's payload.
func (o Offer) Encode() []byte {
	b := append([]byte(nil), o.ID[:]...)
	b = binary.BigEndian.AppendUint32(b, o.Size)
	return append(b, o.SHA256[:]...)
}

// ParseOffer decodes an offer payload.
func ParseOffer(p []byte) (Offer, error) {
	var o Offer
	if len(p) != 16+4+32 {
		return o, errShort
	}
	copy(o.ID[:], p)
	o.Size = binary.BigEndian.Uint32(p[16:])
	copy(o.SHA256[:], p[20:])
	return o, nil
}

// Data carries bytes of the transfer opened by the offer whose seq is Xfer.
type Data struct {
	Xfer   uint32
	Offset uint32
	Bytes  []byte
}

// Encode returns d's payload.
func (d Data) Encode() []byte {
	b := make([]byte, 8, 8+len(d.Bytes))
	binary.BigEndian.PutUint32(b, d.Xfer)
	binary.BigEndian.PutUint32(b[4:], d.Offset)
	return append(b, d.Bytes...)
}

// ParseData decodes a data payload.
func ParseData(p []byte) (Data, error) {
	if len(p) < 8 {
		return Data{}, errShort
	}
	return Data{Xfer: binary.BigEndian.Uint32(p), Offset: binary.BigEndian.Uint32(p[4:]), Bytes: p[8:]}, nil
}

// Reply is an ack, nak or done: all name the report.
type Reply struct {
	ID     ID
	Offset uint32 // ack: bytes held contiguously; nak: offset expected
	Status Status // done
	Reason string // nak, done: why, for logs (≤ 200 bytes)
}

// Encode returns r's payload.
func (r Reply) Encode() []byte {
	reason := r.Reason
	if len(reason) > 200 {
		reason = reason[:200]
	}
	b := append([]byte(nil), r.ID[:]...)
	b = binary.BigEndian.AppendUint32(b, r.Offset)
	b = append(b, byte(r.Status))
	return append(b, reason...)
}

// ParseReply decodes an ack, nak or done payload.
func ParseReply(p []byte) (Reply, error) {
	var r Reply
	if len(p) < 21 || len(p) > 21+200 {
		return r, errShort
	}
	copy(r.ID[:], p)
	r.Offset = binary.BigEndian.Uint32(p[16:])
	r.Status = Status(p[20])
	r.Reason = string(p[21:])
	return r, nil
}

// Range is the bytes [Start, End) of a report.
type Range struct{ Start, End uint32 }

// MaxSackRanges bounds the ranges one ack carries.
const MaxSackRanges = 8

// Sack is what a selective ack adds to an ack, in its reason bytes (a peer
// that predates it reads an ack's reason as text for logs and ignores
// it): the seq of the frame acked, and up to MaxSackRanges ranges held
// beyond the contiguous offset, in order.
type Sack struct {
	Echo   uint32
	Ranges []Range
}

// WithSack returns r (an ack) carrying s.
func (r Reply) WithSack(s Sack) Reply {
	b := binary.BigEndian.AppendUint32(nil, s.Echo)
	for i, rg := range s.Ranges {
		if i == MaxSackRanges {
			break
		}
		b = binary.BigEndian.AppendUint32(b, rg.Start)
		b = binary.BigEndian.AppendUint32(b, rg.End)
	}
	r.Reason = string(b)
	return r
}

// Sack returns the selective ack in r (an ack), if it has one.
func (r Reply) Sack() (Sack, bool) {
	b := []byte(r.Reason)
	if len(b) < 4 || (len(b)-4)%8 != 0 || (len(b)-4)/8 > MaxSackRanges {
		return Sack{}, false
	}
	s := Sack{Echo: binary.BigEndian.Uint32(b)}
	for b = b[4:]; len(b) > 0; b = b[8:] {
		rg := Range{binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])}
		if rg.Start >= rg.End || len(s.Ranges) > 0 && rg.Start <= s.Ranges[len(s.Ranges)-1].End {
			return Sack{}, false
		}
		s.Ranges = append(s.Ranges, rg)
	}
	return s, true
}
