package receive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.bug.st/serial"
	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/wire/serialport"
	"github.com/unwound-dev/unwound/wire/serialproto"
)

// SerialOptions configure the serial receiver.
type SerialOptions struct {
	Port   string // the device; name it by /dev/serial/by-id/... so a replugged adapter is found again
	Baud   int
	Flow   string        // none or rtscts
	Follow bool          // keep listening after the board's queue is empty
	Count  int           // stop after this many new reports (0: never)
	Idle   time.Duration // stop after this long without a frame (0: never)
	Log    func(format string, args ...any)
}

// SerialResult is what a serial session received.
type SerialResult struct {
	Stored, Dups   int // reports stored, duplicates offered
	Noise, Corrupt int // lines that were not frames, frames that failed their check
}

// Serial is the host end of the serial link (docs/serial-protocol.md). It
// returns when the board says its queue is empty (unless Follow), and
// survives the adapter going away: it reopens the same path. A pty named
// as /dev/pts/N is not reopened: when its other end closes, the session
// is over.
func Serial(ctx context.Context, st Sink, o SerialOptions) (SerialResult, error) {
	var res SerialResult
	// Asked before the port can fail: a pty's /dev/pts/N is gone then.
	pty := isPtySlave(o.Port)
	p, err := serialport.Open(o.Port, o.Baud, o.Flow)
	if err != nil {
		return res, err
	}
	host, _ := os.Hostname()
	conn := serialproto.NewConn(p)
	rc := serialproto.NewReceiver(conn, serialStore{st}, serialproto.ReceiverOptions{
		Count: o.Count, Idle: o.Idle, Follow: o.Follow, Name: host, Log: o.Log,
	})
	o.Log("listening on %s at %d baud, storing into %s", o.Port, o.Baud, st)
	for {
		err = rc.Serve(ctx)
		n, c := conn.Noise()
		res.Noise, res.Corrupt = res.Noise+n, res.Corrupt+c
		p.Close()
		if err == nil || errors.Is(err, serialproto.ErrIdle) || errors.Is(err, serialproto.ErrEmpty) || ctx.Err() != nil {
			break
		}
		if pty {
			// A pseudo-terminal whose other end closed (QEMU exited)
			// never comes back, and its number goes to the next pty
			// opened: reopening the path would listen on someone
			// else's line, and, as root, beside its own receiver.
			o.Log("%s: %v; the other end of the pseudo-terminal closed", o.Port, err)
			err = fmt.Errorf("%w: %v", errPtyGone, err)
			break
		}
		// The port failed (EIO: the adapter was unplugged, or the other
		// end of a pty went away): reopen the same path when it is back.
		o.Log("%s: %v; waiting for it to come back", o.Port, err)
		p, err = reopen(ctx, o.Port, o.Baud, o.Flow, o.Idle)
		if err != nil {
			break
		}
		o.Log("%s: reopened", o.Port)
		conn = serialproto.NewConn(p)
		rc.Use(conn)
	}
	res.Stored, res.Dups = rc.Stored, rc.Dups
	switch {
	case err == nil || errors.Is(err, serialproto.ErrEmpty) || errors.Is(err, context.Canceled):
		return res, nil
	case errors.Is(err, serialproto.ErrIdle), errors.Is(err, errPtyGone):
		if o.Count > 0 && rc.Stored < o.Count {
			return res, fmt.Errorf("%d of %d reports before stopping: %w", rc.Stored, o.Count, err)
		}
		return res, nil
	}
	return res, err
}

// errPtyGone ends a session on a pseudo-terminal whose other end closed.
var errPtyGone = errors.New("the pseudo-terminal's other end closed")

// isPtySlave reports whether path itself (not a symlink to it) is a Unix
// 98 pty slave (/dev/pts/N: majors 136 to 143, Linux's
// Documentation/admin-guide/devices.txt). A symlink is a name the user
// chose for a device that may come back (a test's stand-in for
// /dev/serial/by-id/...), and is reopened like one.
func isPtySlave(path string) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return false
	}
	major := unix.Major(uint64(st.Rdev))
	return major >= 136 && major <= 143
}

// reopen opens path again, trying every half second until it works, ctx
// ends, or idle (when set) passes.
func reopen(ctx context.Context, path string, baud int, flow string, idle time.Duration) (serial.Port, error) {
	var give <-chan time.Time
	if idle > 0 {
		give = time.After(idle)
	}
	for {
		p, err := serialport.Open(path, baud, flow)
		if err == nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-give:
			return nil, fmt.Errorf("%w: %s did not come back: %v", serialproto.ErrIdle, path, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// serialStore adapts Store to serialproto.Store.
type serialStore struct{ s Sink }

func (s serialStore) Has(id serialproto.ID) bool { return s.s.Has(id.String()) }

func (s serialStore) Put(id serialproto.ID, data []byte) (serialproto.Status, string, error) {
	_, stored, invalid, err := s.s.Put(data, id.String())
	switch {
	case err != nil:
		return 0, "", err
	case invalid != nil:
		return serialproto.Rejected, invalid.Error(), nil
	case !stored:
		return serialproto.Duplicate, "", nil
	}
	return serialproto.Stored, "", nil
}
