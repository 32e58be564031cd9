// Package coredumpsock serves the kernel's coredump socket: with
// core_pattern "@/path" (Linux 6.16) the kernel connects to the AF_UNIX
// stream socket at path for every crash and streams the core into the
// connection; with "@@/path" (6.17) it first sends a request and waits for
// an answer that says how to proceed (include/uapi/linux/coredump.h,
// fs/coredump.c). The crashed process is the connection's peer:
// SO_PEERCRED and SO_PEERPIDFD name it, and PIDFD_GET_INFO says whether it
// is dumping core, which no other client can fake.
//
// The package speaks the protocol and runs the accept loop; what to do
// with each core is the caller's (the handler's pipe-mode path).
package coredumpsock

import (
	"encoding/binary"
	"fmt"
)

// The request and answer masks (COREDUMP_KERNEL, ...).
const (
	// Kernel: the kernel streams the core into the connection.
	Kernel = 1 << 0
	// Userspace: the server takes the core itself; the kernel sends nothing.
	Userspace = 1 << 1
	// Reject: no core at all.
	Reject = 1 << 2
	// Wait: the kernel keeps the task (and /proc/<pid>) until the server
	// closes the connection.
	Wait = 1 << 3
)

// ReqSizeVer0 and AckSizeVer0 are the sizes of the first published
// struct coredump_req and struct coredump_ack: the least a kernel sends
// and the least it takes. They are also the sizes this package knows.
const (
	ReqSizeVer0 = 16
	AckSizeVer0 = 16
)

// MaxReqSize bounds a request this server reads: a kernel that grows the
// struct by a few fields stays far below; beyond it the connection is
// not the kernel's.
const MaxReqSize = 4096

// Request is struct coredump_req: Size is what the kernel sent (it may be
// larger than this package knows: the rest is read and ignored), SizeAck
// the largest answer it takes, Mask the answers it understands.
type Request struct {
	Size, SizeAck uint32
	Mask          uint64
}

// ParseRequest decodes a whole request (b holds its Size bytes, in the
// kernel's byte order, the host's).
func ParseRequest(b []byte) (Request, error) {
	if len(b) < 4 {
		return Request{}, fmt.Errorf("coredump request of %d bytes", len(b))
	}
	var r Request
	r.Size = binary.NativeEndian.Uint32(b)
	switch {
	case r.Size < ReqSizeVer0:
		return r, fmt.Errorf("coredump request says it has %d bytes, fewer than the %d of its first version", r.Size, ReqSizeVer0)
	case r.Size > MaxReqSize:
		return r, fmt.Errorf("coredump request says it has %d bytes, more than %d", r.Size, MaxReqSize)
	case uint32(len(b)) != r.Size:
		return r, fmt.Errorf("coredump request says it has %d bytes, %d arrived", r.Size, len(b))
	}
	r.SizeAck = binary.NativeEndian.Uint32(b[4:])
	r.Mask = binary.NativeEndian.Uint64(b[8:])
	if r.SizeAck < AckSizeVer0 {
		return r, fmt.Errorf("coredump request takes answers of %d bytes, fewer than the %d of the first version", r.SizeAck, AckSizeVer0)
	}
	return r, nil
}

// Choose is the answer to a request: the core streamed (Kernel), and the
// task held until the connection closes (Wait) when the kernel offers it,
// so /proc/<pid>/mem stays readable as in pipe mode under
// core_pipe_limit. A kernel that cannot stream the core gets Reject.
func (r Request) Choose() uint64 {
	if r.Mask&Kernel == 0 {
		return Reject & r.Mask
	}
	return (Kernel | Wait) & r.Mask
}

// Ack encodes struct coredump_ack with mask in the size the kernel
// takes: this package's (AckSizeVer0), never more than r.SizeAck.
func (r Request) Ack(mask uint64) ([]byte, error) {
	if mask&^r.Mask != 0 {
		return nil, fmt.Errorf("answer %#x has bits the kernel did not offer (%#x)", mask, r.Mask)
	}
	b := make([]byte, AckSizeVer0)
	binary.NativeEndian.PutUint32(b, AckSizeVer0)
	// b[4:8] is the spare word: zero, or the kernel refuses the answer.
	binary.NativeEndian.PutUint64(b[8:], mask)
	return b, nil
}

// MarkSize is the size of the kernel's verdict on an answer (enum
// coredump_mark, a 32-bit word).
const MarkSize = 4

// ParseMark decodes the kernel's verdict on an answer: nil when the
// kernel took it.
func ParseMark(b []byte) error {
	if len(b) != MarkSize {
		return fmt.Errorf("coredump verdict of %d bytes", len(b))
	}
	switch m := binary.NativeEndian.Uint32(b); m {
	case 0: // COREDUMP_MARK_REQACK
		return nil
	case 1:
		return fmt.Errorf("the kernel refused the answer: too small (COREDUMP_MARK_MINSIZE)")
	case 2:
		return fmt.Errorf("the kernel refused the answer: too large (COREDUMP_MARK_MAXSIZE)")
	case 3:
		return fmt.Errorf("the kernel refused the answer: unsupported bits (COREDUMP_MARK_UNSUPPORTED)")
	case 4:
		return fmt.Errorf("the kernel refused the answer: conflicting bits (COREDUMP_MARK_CONFLICTING)")
	default:
		return fmt.Errorf("the kernel refused the answer: verdict %d", m)
	}
}
