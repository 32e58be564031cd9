package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/testkit/syncbuf"
	"github.com/unwound-dev/unwound/testkit/testbin"
	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/uploader/serialup"
	"github.com/unwound-dev/unwound/wire/serialproto"
)

// Serial end to end: the unwound-uploader binary and `unwound receive` on
// two real ptys joined by a relay that behaves like a cheap USB-serial
// cable on a board console, or like a noisy dedicated line.

// pty opens a pseudo-terminal pair in-process; the slave stays open (raw)
// so the master never sees EIO when the program under test closes it.
// closeAll unplugs it: master and slave closed, the program's reads fail.
func pty(t testing.TB) (master *os.File, slavePath string, closeAll func()) {
	// A raw non-blocking descriptor, wrapped only after the ioctls: Fd()
	// would put the file in blocking mode, and Close would then wait for
	// the relay's pending Read instead of hanging up the line.
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skip("no /dev/ptmx:", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	m := os.NewFile(uintptr(fd), "ptmx")
	slavePath = fmt.Sprintf("/dev/pts/%d", n)
	s, err := os.OpenFile(slavePath, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON | unix.ECHO | unix.ISIG | unix.IEXTEN
	tio.Iflag &^= unix.IXON | unix.ICRNL | unix.INLCR
	tio.Oflag &^= unix.OPOST
	unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio)
	closeAll = func() { m.Close(); s.Close() }
	t.Cleanup(closeAll)
	return m, slavePath, closeAll
}

// faults is what a relay does to the bytes it carries, each way.
type faults struct {
	bps      int           // pace: bytes per second (10 bits a byte), 0: unpaced
	latency  time.Duration // added to every byte (a USB adapter's turnaround)
	drop     float64       // per byte: lost
	flip     float64       // per byte: one bit flipped
	truncate float64       // per line: the rest of the line is lost
	noise    float64       // per line: a kernel message, between lines or (a third) inside one
}

// relay joins two pty masters like a UART cable with faults; cut drops
// everything while set. The receiver's end can be unplugged and replaced.
type relay struct {
	f   faults
	cut atomic.Bool

	mu                                        sync.Mutex
	carried                                   int64 // bytes delivered, both ways
	dropped, flipped, truncated, injected, in int64
	rx                                        *os.File // the receiver's master, now
	toUp                                      chan chunk
}

type chunk struct {
	at time.Time
	b  []byte
}

// newRelay starts carrying bytes between up and rx.
func newRelay(f faults, up, rx *os.File) *relay {
	l := &relay{f: f, rx: rx}
	toRx, toUp := make(chan chunk, 4096), make(chan chunk, 4096)
	go l.read(up, toRx, 1)
	go l.read(rx, toUp, 2)
	go l.write(toRx, func() *os.File { l.mu.Lock(); defer l.mu.Unlock(); return l.rx })
	go l.write(toUp, func() *os.File { return up })
	l.toUp = toUp
	return l
}

// replug gives the receiver's end a new master (the adapter came back).
func (l *relay) replug(rx *os.File, seed int64) {
	l.mu.Lock()
	l.rx = rx
	l.mu.Unlock()
	go l.read(rx, l.toUp, seed)
}

func (l *relay) count(p *int64, n int) {
	l.mu.Lock()
	*p += int64(n)
	l.mu.Unlock()
}

// due says a fault of a kind whose rate is above zero, and that has not
// happened by chance (*p is 0), happens now: once the relay has read at
// bytes. At these rates a run may otherwise see none, and the tests that
// count on one of each would pass without the fault.
func (l *relay) due(rate float64, p *int64, at int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return rate > 0 && *p == 0 && l.in >= at
}

// read applies the faults to what from sends and queues it for delivery.
func (l *relay) read(from *os.File, to chan<- chunk, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	buf := make([]byte, 4096)
	lineStart, trunc, midAt, pos := true, false, -1, 0
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		l.count(&l.in, n)
		if l.cut.Load() {
			continue
		}
		var out []byte
		for _, c := range buf[:n] {
			if lineStart {
				lineStart, trunc, midAt, pos = false, false, -1, 0
				if rng.Float64() < l.f.noise {
					if rng.Intn(3) == 0 {
						midAt = 1 + rng.Intn(400)
					} else {
						out = append(out, kmsg(rng)...)
						l.count(&l.injected, 1)
					}
				}
				if rng.Float64() < l.f.truncate || l.due(l.f.truncate, &l.truncated, 1000) {
					trunc = true
					l.count(&l.truncated, 1)
				}
			}
			pos++
			if pos == midAt {
				out = append(out, kmsg(rng)...)
				l.count(&l.injected, 1)
			}
			if c == '\n' {
				lineStart = true
			} else if trunc {
				continue
			}
			switch x := rng.Float64(); {
			case x < l.f.drop || l.due(l.f.drop, &l.dropped, 3000):
				l.count(&l.dropped, 1)
				continue
			case x < l.f.drop+l.f.flip || l.due(l.f.flip, &l.flipped, 2000):
				c ^= 1 << rng.Intn(8)
				l.count(&l.flipped, 1)
			}
			out = append(out, c)
		}
		to <- chunk{at: time.Now().Add(l.f.latency), b: out}
	}
}

func kmsg(rng *rand.Rand) []byte {
	msgs := []string{
		"usb 1-1: reset high-speed USB device number %d using ehci-platform",
		"EXT4-fs (mmcblk0p%d): recovery complete",
		"rcu: INFO: rcu_sched self-detected stall on CPU %d",
		"cfg80211: failed to load regulatory.db (%d)",
	}
	return []byte(fmt.Sprintf("[%5d.%06d] "+msgs[rng.Intn(len(msgs))]+"\r\n", rng.Intn(99999), rng.Intn(1e6), rng.Intn(9)))
}

// write delivers chunks after their latency, paced at the baud rate.
func (l *relay) write(from <-chan chunk, to func() *os.File) {
	next := time.Now()
	for c := range from {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		for b := c.b; len(b) > 0; {
			n := len(b)
			if l.f.bps > 0 {
				if n > 64 {
					n = 64
				}
				// A line idle for a while starts afresh; a sleep that
				// overran on a loaded machine does not cost line time
				// (a UART does not pause when the CPU is late; its
				// FIFO and the tty buffer hand over what came since).
				if now := time.Now(); next.Before(now.Add(-50 * time.Millisecond)) {
					next = now
				}
				next = next.Add(time.Duration(n) * time.Second / time.Duration(l.f.bps))
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
			}
			if !l.cut.Load() {
				to().Write(b[:n])
				l.count(&l.carried, n)
			}
			b = b[n:]
		}
	}
}

func (l *relay) stats() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("carried %d bytes; %d dropped, %d flipped, %d lines truncated, %d kernel messages", l.carried, l.dropped, l.flipped, l.truncated, l.injected)
}

func binaries(t testing.TB) (uploader, unwound string) {
	return testbin.Build(t, "unwound-uploader", ""), testbin.Build(t, "unwound", "")
}

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// rig is a board queue, a relay and the paths both programs open. The
// receiver opens rxLink, a symlink like /dev/serial/by-id/... naming the
// receiver's pty.
type rig struct {
	up       string // the uploader's slave
	rxLink   string
	line     *relay
	unplug   func() // closes the receiver's pty
	queueDir string
	cfg      string
	out      string
	want     map[string][]byte
}

func newRig(t testing.TB, n, frames int, f faults) *rig {
	mUp, sUp, _ := pty(t)
	mRx, sRx, closeRx := pty(t)
	q := testutil.Queue(t)
	r := &rig{up: sUp, line: newRelay(f, mUp, mRx), unplug: closeRx, queueDir: q.Dir(), out: t.TempDir()}
	r.rxLink = filepath.Join(t.TempDir(), "usb-FTDI_FT232R_A9XYZ-if00-port0")
	if err := os.Symlink(sRx, r.rxLink); err != nil {
		t.Fatal(err)
	}
	r.want = testutil.Fill(t, q, rand.New(rand.NewSource(int64(n*frames))), n, frames)
	r.cfg = testutil.Config(t, q.Dir(), fmt.Sprintf(`[device]
id = "board-1"
[upload]
transport = "serial"
[serial]
port = %q
baud = 115200
`, sUp))
	return r
}

// framing sets serial.framing in the board's config ("text" or "binary").
func (r *rig) framing(t testing.TB, framing string) {
	f, err := os.OpenFile(r.cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintf(f, "framing = %q\n", framing)
}

// replug unplugs the receiver's adapter for d, then plugs a new one in
// under the same by-id name.
func (r *rig) replug(t *testing.T, d time.Duration) {
	os.Remove(r.rxLink)
	r.unplug()
	time.Sleep(d)
	m, s, closeAll := pty(t)
	r.unplug = closeAll
	r.line.replug(m, 3)
	if err := os.Symlink(s, r.rxLink); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) receiver(t testing.TB, args ...string) (*exec.Cmd, *syncbuf.Buffer) {
	_, unwound := binaries(t)
	stderr := &syncbuf.Buffer{}
	cmd := exec.Command(unwound, append([]string{"receive", "--port", r.rxLink, "--out", r.out}, args...)...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, stderr
}

func (r *rig) uploader(t testing.TB, rto string, args ...string) *exec.Cmd {
	up, _ := binaries(t)
	cmd := exec.Command(up, append([]string{"--config", r.cfg}, args...)...)
	cmd.Env = append(os.Environ(), "UNWOUND_SERIAL_RTO="+rto)
	return cmd
}

// waitExit waits for a receiver that should exit by itself.
func waitExit(t *testing.T, cmd *exec.Cmd, log fmt.Stringer, within time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("receiver: %v\n%s", err, log)
		}
	case <-time.After(within):
		t.Fatalf("the receiver did not exit after the board's queue was empty:\n%s", log)
	}
}

// checkOnce checks every report arrived, byte-identical, stored once, and
// the queue is empty.
func (r *rig) checkOnce(t *testing.T, rxLog string) {
	t.Helper()
	testutil.Received(t, r.out, r.want)
	if n := len(testutil.Entries(t, r.queueDir)); n != 0 {
		t.Fatalf("%d entries left", n)
	}
	if n := strings.Count(rxLog, ": stored"); n != len(r.want) {
		t.Fatalf("stored %d times for %d reports:\n%s", n, len(r.want), rxLog)
	}
}

// A cheap adapter on a busy console: paced at 115200 baud, 8 ms each
// way, bytes dropped and flipped, lines cut short, kernel messages
// between and inside frame lines.
var lossy = faults{bps: 11520, latency: 8 * time.Millisecond, drop: 3e-5, flip: 3e-5, truncate: 0.02, noise: 0.1}

// TestSerialLossyRelay: every report arrives exactly once and
// byte-identical through the lossy relay; the receiver exits by itself
// when the board says its queue is empty.
func TestSerialLossyRelay(t *testing.T) {
	r := newRig(t, 6, 500, lossy)
	rx, rxLog := r.receiver(t, "--idle", "60s")
	out, err := r.uploader(t, "1s", "--once", "--tries", "5").CombinedOutput()
	if err != nil {
		t.Fatalf("uploader: %v\n%s\nreceiver:\n%s", err, out, rxLog)
	}
	waitExit(t, rx, rxLog, 10*time.Second)
	t.Logf("uploader:\n%s\nreceiver:\n%s\nrelay: %s", out, rxLog, r.line.stats())
	r.checkOnce(t, rxLog.String())
	if !strings.Contains(rxLog.String(), "queue is empty") {
		t.Fatal("the receiver did not hear that the queue was empty")
	}
	r.line.mu.Lock()
	none := r.line.injected == 0 || r.line.truncated == 0 || r.line.dropped == 0 || r.line.flipped == 0
	r.line.mu.Unlock()
	if none {
		t.Fatalf("faults not injected: %s", r.line.stats())
	}
}

// TestSerialCutAndResume: the cable is cut (2 s) mid-transfer and restored, then
// the uploader is killed mid-report and started again: nothing is deleted
// without an ack, the transfer resumes from the receiver's offset, and
// every report is stored once. In both framings.
func TestSerialCutAndResume(t *testing.T) {
	for _, framing := range []string{"text", "binary"} {
		t.Run(framing, func(t *testing.T) { cutAndResume(t, framing) })
	}
}

func cutAndResume(t *testing.T, framing string) {
	r := newRig(t, 3, 4000, faults{bps: 11520, latency: 8 * time.Millisecond})
	r.framing(t, framing)
	rx, rxLog := r.receiver(t, "--idle", "120s")
	start := time.Now()

	// 1. Start; once the first report is stored and the second under
	// way, pull the cable for 2 s, restore it, and kill the uploader
	// mid-report (the board side closes; the entry in flight must stay
	// queued and its bytes held by the receiver).
	up1 := r.uploader(t, "", "--once", "--tries", "10", "--backoff", "200ms")
	var up1Out syncbuf.Buffer
	up1.Stderr = &up1Out
	if err := up1.Start(); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rxLog, ": stored", 1, 60*time.Second)
	time.Sleep(time.Second)
	r.line.cut.Store(true)
	time.Sleep(2 * time.Second)
	r.line.cut.Store(false)
	time.Sleep(500 * time.Millisecond)
	up1.Process.Kill()
	up1.Wait()
	before := testutil.Entries(t, r.queueDir)
	if len(before) == 0 {
		t.Fatal("everything sent before the cut: make the reports bigger")
	}
	stored0 := len(testutil.Entries(t, r.out))
	if stored0+len(before) != len(r.want) {
		t.Fatalf("%d stored + %d queued != %d: an entry was deleted without an ack", stored0, len(before), len(r.want))
	}
	// 3. Restart: it resumes where the receiver is and finishes.
	out, err := r.uploader(t, "", "--once", "--tries", "10", "--backoff", "200ms").CombinedOutput()
	if err != nil {
		t.Fatalf("uploader: %v\n%s\nfirst run:\n%s\nreceiver:\n%s", err, out, up1Out.String(), rxLog)
	}
	waitExit(t, rx, rxLog, 10*time.Second)
	log := rxLog.String()
	t.Logf("first run:\n%s\nsecond run:\n%s\nreceiver:\n%s", up1Out.String(), out, log)
	r.checkOnce(t, log)
	if !resumed(log) {
		t.Fatal("no offer resumed from a non-zero offset")
	}
	t.Logf("%d reports, %d bytes, cut 2 s, kill and restart: %v", len(r.want), total(r.want), time.Since(start).Round(time.Millisecond))
}

// TestSerialReceiveReplug: the host's adapter disappears mid-transfer and
// comes back 2 s later under the same by-id name; `unwound receive`
// reopens it and the transfer resumes without duplicates.
func TestSerialReceiveReplug(t *testing.T) {
	r := newRig(t, 3, 2000, faults{bps: 11520, latency: 8 * time.Millisecond})
	rx, rxLog := r.receiver(t, "--idle", "60s")
	up := r.uploader(t, "", "--once", "--tries", "10", "--backoff", "200ms")
	var upOut syncbuf.Buffer
	up.Stdout, up.Stderr = &upOut, &upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1000 * time.Millisecond)
	r.replug(t, 2*time.Second)
	if err := up.Wait(); err != nil {
		t.Fatalf("uploader: %v\n%s\nreceiver:\n%s", err, &upOut, rxLog)
	}
	waitExit(t, rx, rxLog, 10*time.Second)
	log := rxLog.String()
	t.Logf("uploader:\n%s\nreceiver:\n%s", &upOut, log)
	if !strings.Contains(log, "waiting for it to come back") || !strings.Contains(log, "reopened") {
		t.Fatal("the receiver did not lose and reopen its port")
	}
	r.checkOnce(t, log)
}

// waitLog waits until log shows s n times.
func waitLog(t *testing.T, log fmt.Stringer, s string, n int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); strings.Count(log.String(), s) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q ×%d after %v:\n%s", s, n, within, log)
		}
	}
}

// waitStored waits until dir holds n reports.
func waitStored(t *testing.T, dir string, n int, within time.Duration, log fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(testutil.Entries(t, dir)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d reports stored after %v:\n%s", len(testutil.Entries(t, dir)), n, within, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSerialDaemon: the uploader as a daemon (no --once) over the lossy
// relay drains what is queued at start, then, woken by inotify (its poll
// interval is the default hour), reports queued later; SIGTERM ends it cleanly.
// The receiver keeps listening (--follow) across both drains.
func TestSerialDaemon(t *testing.T) {
	r := newRig(t, 2, 300, lossy)
	rx, rxLog := r.receiver(t, "--follow")
	up := r.uploader(t, "1s")
	var upOut syncbuf.Buffer
	up.Stdout, up.Stderr = &upOut, &upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Process.Kill(); up.Wait() })
	waitStored(t, r.out, 2, 30*time.Second, &upOut)
	q, err := queue.Open(r.queueDir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	if err != nil {
		t.Fatal(err)
	}
	more := testutil.Fill(t, q, rand.New(rand.NewSource(99)), 3, 300)
	for id, b := range more {
		r.want[id] = b
	}
	waitStored(t, r.out, 5, 30*time.Second, &upOut)
	// After each drain the daemon tells the receiver the queue is empty.
	for deadline := time.Now().Add(20 * time.Second); strings.Count(rxLog.String(), "queue is empty") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the receiver did not hear 'queue empty' after each drain:\n%s", rxLog)
		}
	}
	up.Process.Signal(unix.SIGTERM)
	if err := up.Wait(); err != nil {
		t.Fatalf("daemon on SIGTERM: %v\n%s", err, &upOut)
	}
	if rx.ProcessState != nil {
		t.Fatal("the receiver exited although --follow")
	}
	log := rxLog.String()
	t.Logf("daemon:\n%s\nreceiver:\n%s\nrelay: %s", &upOut, log, r.line.stats())
	r.checkOnce(t, log)
	if !strings.Contains(upOut.String(), "watching ") || strings.Contains(upOut.String(), "polling") {
		t.Fatal("the daemon did not watch the queue with inotify")
	}
}

// TestSerialDaemonPolling: without inotify (the watch fails, as on a
// kernel without CONFIG_INOTIFY_USER or out of instances) the daemon
// polls every interval and still delivers reports queued later.
func TestSerialDaemonPolling(t *testing.T) {
	r := newRig(t, 1, 200, faults{bps: 11520, latency: 8 * time.Millisecond})
	_, rxLog := r.receiver(t, "--follow")
	q, err := queue.Open(r.queueDir, queue.Options{Check: decode.Entry, AllowVolatile: true})
	if err != nil {
		t.Fatal(err)
	}
	var logMu sync.Mutex
	var log strings.Builder
	logf := func(format string, args ...any) {
		logMu.Lock()
		fmt.Fprintf(&log, format+"\n", args...)
		logMu.Unlock()
	}
	tr := serialup.New(serialup.Config{Port: r.up, Baud: 115200, Proto: serialproto.Options{RTO: 400 * time.Millisecond}, Log: logf})
	defer tr.Close()
	u := &uploader.Uploader{Queue: q, Transport: tr, DeviceID: "board-1", Log: logf,
		Watch: func(string) (<-chan struct{}, func(), error) { return nil, nil, unix.ENOSYS }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- u.Run(ctx, 500*time.Millisecond, &uploader.Backoff{Min: 200 * time.Millisecond, Max: time.Second})
	}()
	waitStored(t, r.out, 1, 30*time.Second, rxLog)
	more := testutil.Fill(t, q, rand.New(rand.NewSource(98)), 2, 200)
	for id, b := range more {
		r.want[id] = b
	}
	waitStored(t, r.out, 3, 30*time.Second, rxLog)
	// The receiver stores, then acks; the uploader removes the entry only
	// on the ack: wait for that before stopping it.
	for deadline := time.Now().Add(20 * time.Second); len(testutil.Entries(t, r.queueDir)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			break // checkOnce says how many are left
		}
	}
	cancel()
	<-done
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(log.String(), "polling every 500ms") {
		t.Fatalf("no polling fallback:\n%s", log.String())
	}
	r.checkOnce(t, rxLog.String())
}

func resumed(log string) bool {
	for _, l := range strings.Split(log, "\n") {
		if i := strings.Index(l, ", have "); i >= 0 && strings.Contains(l, "offer ") && !strings.HasSuffix(l, ", have 0") {
			return true
		}
	}
	return false
}

func total(m map[string][]byte) int {
	n := 0
	for _, b := range m {
		n += len(b)
	}
	return n
}

// TestSerialIntoCollector: unwound receive hands what it drains to a
// collector, by its directory (--dir, beside --out files) and by its URL
// (--collector, as an uploader posts): every report arrives once,
// byte-identical, in the database.
func TestSerialIntoCollector(t *testing.T) {
	t.Run("dir", func(t *testing.T) {
		r := newRig(t, 5, 100, faults{})
		cdir := t.TempDir()
		rx, rxLog := r.receiver(t, "--dir", cdir, "--idle", "60s")
		if out, err := r.uploader(t, "1s", "--once", "--tries", "5").CombinedOutput(); err != nil {
			t.Fatalf("uploader: %v\n%s\nreceiver:\n%s", err, out, rxLog)
		}
		waitExit(t, rx, rxLog, 20*time.Second)
		r.checkOnce(t, rxLog.String())
		collected(t, cdir, r.want)
	})
	t.Run("url", func(t *testing.T) {
		r := newRig(t, 5, 100, faults{})
		srv := startServe(t, t.TempDir(), "--token", "s3cret")
		rx, rxLog := r.receiver(t, "--collector", srv.url, "--token", "s3cret", "--idle", "60s")
		if out, err := r.uploader(t, "1s", "--once", "--tries", "5").CombinedOutput(); err != nil {
			t.Fatalf("uploader: %v\n%s\nreceiver:\n%s", err, out, rxLog)
		}
		waitExit(t, rx, rxLog, 20*time.Second)
		r.checkOnce(t, rxLog.String())
		collected(t, srv.dir, r.want)
		if n := strings.Count(srv.Log(), ": stored"); n != len(r.want) {
			t.Fatalf("the collector stored %d reports, want %d:\n%s", n, len(r.want), srv.Log())
		}
	})
}

// A noisy dedicated line: 1e-3 of the bytes lost and 1e-3 flipped each
// way, 2 % of the lines cut short, paced at 115200 baud with 8 ms of
// adapter latency each way.
var noisy = faults{bps: 11520, latency: 8 * time.Millisecond, drop: 1e-3, flip: 1e-3, truncate: 0.02}

// TestSerialNoisyLine: every report crosses the noisy line exactly once,
// byte-identical, in each framing, within 10 minutes for 100 reports
// (UNWOUND_SERIAL_LONG=1; `make test` sends 8 in each framing). It prints
// the goodput as a share of the line rate.
func TestSerialNoisyLine(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes over a paced relay")
	}
	n := 8
	if os.Getenv("UNWOUND_SERIAL_LONG") != "" {
		n = 100
	}
	if v, err := strconv.Atoi(os.Getenv("UNWOUND_SERIAL_REPORTS")); err == nil && v > 0 {
		n = v
	}
	for _, framing := range []string{"binary", "text"} {
		t.Run(framing, func(t *testing.T) {
			r := newRig(t, n, 1500, noisy)
			r.framing(t, framing)
			budget := 10 * time.Minute
			rx, rxLog := r.receiver(t, "--idle", budget.String())
			start := time.Now()
			up := r.uploader(t, "", "--once", "--tries", "1000", "--backoff", "200ms")
			var upOut syncbuf.Buffer
			up.Stdout, up.Stderr = &upOut, &upOut
			if err := up.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- up.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("uploader: %v\n%s\nreceiver:\n%s", err, &upOut, rxLog)
				}
			case <-time.After(budget):
				up.Process.Kill()
				<-done
				t.Fatalf("%d of %d reports stored in %v\n%s", strings.Count(rxLog.String(), ": stored"), n, budget, rxLog)
			}
			elapsed := time.Since(start)
			waitExit(t, rx, rxLog, 30*time.Second)
			log := rxLog.String()
			r.checkOnce(t, log)
			bytes := total(r.want)
			good := float64(bytes) / elapsed.Seconds()
			t.Logf("%s framing: %d/%d reports (%d bytes) exactly once in %v; goodput %.0f B/s = %.2f of the line rate (11520 B/s); relay: %s; uploader: %s",
				framing, n, n, bytes, elapsed.Round(time.Millisecond), good, good/11520, r.line.stats(), summary(upOut.String()))
			if os.Getenv("UNWOUND_SERIAL_LOG") != "" {
				t.Logf("uploader:\n%s\nreceiver:\n%s", &upOut, log)
			}
		})
	}
}

// summary counts the resends and the final chunk sizes the uploader
// logged.
func summary(log string) string {
	resends, timeouts, lines := 0, 0, 0
	last := ""
	for _, l := range strings.Split(log, "\n") {
		var n, to, c int
		if i := strings.Index(l, ".zst: "); i >= 0 {
			if _, err := fmt.Sscanf(l[i+6:], "%d data frames resent, %d timeouts, chunk now %d bytes", &n, &to, &c); err == nil {
				resends += n
				timeouts += to
				lines++
				last = strconv.Itoa(c)
			}
		}
	}
	return fmt.Sprintf("%d frames resent and %d timeouts over %d reports, last chunk %s bytes", resends, timeouts, lines, last)
}
