package receive

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/wire/serialproto"
)

// ptyMaster opens a pseudo-terminal and returns its master, as QEMU's
// `-chardev pty` holds it, and the slave's path, which `unwound receive`
// opens. Nobody else holds the slave: when the master closes (QEMU
// exits), the receiver's reads fail as they do in the demo.
func ptyMaster(t testing.TB) (*os.File, string) {
	// Non-blocking, wrapped only after the ioctls: Close then ends a
	// pending Read instead of waiting for it.
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skip("no /dev/ptmx:", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), "ptmx"), fmt.Sprintf("/dev/pts/%d", n)
}

// serialResult is what Serial returned.
type serialResult struct {
	res SerialResult
	err error
}

// receiveOne runs Serial on the pty slave at path as `unwound receive
// --count 1` does (an idle timeout of a minute, no log), in the
// background; what it returns comes on the channel.
func receiveOne(ctx context.Context, st Sink, path string) <-chan serialResult {
	done := make(chan serialResult, 1)
	go func() {
		res, err := Serial(ctx, st, SerialOptions{Port: path, Baud: 115200, Count: 1, Idle: time.Minute, Log: func(string, ...any) {}})
		done <- serialResult{res, err}
	}()
	return done
}

// boardReport is a random report, and its id as the serial link says it.
func boardReport(rng *rand.Rand) (serialproto.ID, []byte) {
	id, data := testutil.Report(rng, "crash", 40)
	var rid serialproto.ID
	hex.Decode(rid[:], []byte(id))
	return rid, data
}

// TestSerialCountExits is the demo's drain, many times over: the board's
// uploader (on a pty master, where QEMU sits) delivers one report, says
// its queue is empty, and the board powers off (the master closes);
// `unwound receive --count 1` on the slave must have stored the report
// and return, every time, without waiting for its idle timeout.
func TestSerialCountExits(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 20
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < runs; i++ {
		rid, data := boardReport(rng)
		m, path := ptyMaster(t)
		dir := t.TempDir()
		st, err := NewStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := receiveOne(ctx, st, path)
		// The board: hello, the report, the queue is empty, power off.
		c := serialproto.NewConn(m)
		snd := serialproto.NewSender(c, serialproto.Options{Name: "board"})
		if err := snd.Handshake(ctx); err != nil {
			t.Fatalf("run %d: handshake: %v", i, err)
		}
		if s, err := snd.Send(ctx, rid, data); err != nil || s != serialproto.Stored {
			t.Fatalf("run %d: send: %v %v", i, s, err)
		}
		snd.Empty(ctx)
		m.Close()
		select {
		case r := <-done:
			if r.err != nil || r.res.Stored != 1 {
				t.Fatalf("run %d: receive: %+v, %v", i, r.res, r.err)
			}
		case <-time.After(10 * time.Second):
			cancel()
			t.Fatalf("run %d: receive --count 1 did not return after the drain", i)
		}
		cancel()
	}
}

// TestSerialStalePty is what made the demo's `unwound receive --count 1`
// hang in about one arm run in five: another receiver whose board had
// powered off before it got its reports (TestImage's keep listening for
// ten seconds after) went on reopening its pty's path, /dev/pts/N, every
// half second. Pty numbers are reused, lowest first: the next QEMU's pty
// was /dev/pts/N, the stale receiver opened it too (root is not held off
// by TIOCEXCL), and the two shared its bytes; when the stale one got the
// report, the board deleted it and the right receiver waited until its
// idle timeout. A pty that went away never comes back: a receiver on
// /dev/pts/N must stop, not wait for the number's next owner.
func TestSerialStalePty(t *testing.T) {
	runs := 10
	if testing.Short() {
		runs = 2
	}
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < runs; i++ {
		// The stale receiver: its board powers off before sending.
		m1, path := ptyMaster(t)
		st1, _ := NewStore(t.TempDir())
		ctx, cancel := context.WithCancel(context.Background())
		stale := receiveOne(ctx, st1, path)
		time.Sleep(50 * time.Millisecond) // it has the port open
		m1.Close()
		time.Sleep(50 * time.Millisecond) // it has seen the port fail

		// The next board, on the next pty (very likely the same number).
		m2, path2 := ptyMaster(t)
		rid, data := boardReport(rng)
		st2, _ := NewStore(t.TempDir())
		done := receiveOne(ctx, st2, path2)
		time.Sleep(time.Second) // the stale receiver would have reopened it
		c := serialproto.NewConn(m2)
		snd := serialproto.NewSender(c, serialproto.Options{Name: "board"})
		sent := snd.Handshake(ctx) == nil
		if sent {
			s, err := snd.Send(ctx, rid, data)
			sent = err == nil && s == serialproto.Stored
		}
		m2.Close()
		staleDone := false
		select {
		case r := <-stale:
			staleDone = true
			if r.err == nil {
				t.Errorf("run %d: the stale receiver on %s returned no error", i, path)
			}
		default:
			t.Errorf("run %d: the receiver on %s still runs after its pty went away", i, path)
		}
		select {
		case r := <-done:
			if !sent || r.res.Stored != 1 {
				t.Errorf("run %d: the board's receiver on %s stored %d reports (sent: %v); the stale one on %s took the rest", i, path2, r.res.Stored, sent, path)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("run %d: receive --count 1 on %s did not return after the drain (sent: %v)", i, path2, sent)
		}
		cancel()
		if !staleDone {
			<-stale
		}
		if t.Failed() {
			return
		}
	}
}
