package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/internal/testutil"
)

// pty opens a pseudo-terminal pair in-process; the slave stays open (raw)
// so the master never sees EIO when the program under test closes it.
func pty(t *testing.T) (master *os.File, slavePath string) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skip("no /dev/ptmx:", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
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
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, slavePath
}

// line joins two pty masters like a UART cable: optionally paced at a
// baud rate (10 bits a byte), with kernel messages injected, and cut
// (everything dropped) while cut is set.
type line struct {
	bps      int // bytes per second, 0: unpaced
	noise    bool
	cut      atomic.Bool
	mu       sync.Mutex
	bytes    int64
	injected int
}

func (l *line) run(from, to *os.File, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	br := bufio.NewReaderSize(from, 1<<16)
	next := time.Now()
	for {
		b, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		if l.cut.Load() {
			continue
		}
		if l.noise && rng.Intn(8) == 0 {
			msg := fmt.Sprintf("[%5d.%06d] usb 1-1: reset high-speed USB device number %d\r\n", rng.Intn(99999), rng.Intn(1e6), rng.Intn(9))
			if rng.Intn(3) == 0 && len(b) > 20 {
				// A kernel message lands inside one of our lines.
				i := rng.Intn(len(b) - 1)
				b = append(append(append([]byte(nil), b[:i]...), msg...), b[i:]...)
			} else {
				b = append([]byte(msg), b...)
			}
			l.mu.Lock()
			l.injected++
			l.mu.Unlock()
		}
		if l.bps > 0 {
			next = next.Add(time.Duration(len(b)) * time.Second / time.Duration(l.bps))
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			} else {
				next = time.Now()
			}
		}
		to.Write(b)
		l.mu.Lock()
		l.bytes += int64(len(b))
		l.mu.Unlock()
	}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) (uploader, unwound string) {
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "unwound-e2e-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", binDir+"/", "../unwound-uploader", "../unwound").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "unwound-uploader"), filepath.Join(binDir, "unwound")
}

type rig struct {
	up, rx   string // slave paths: uploader's and receiver's
	line     *line
	queueDir string
	cfg      string
	out      string
	want     map[string][]byte
}

func newRig(t *testing.T, n, frames int, bps int, noise bool) *rig {
	mUp, sUp := pty(t)
	mRx, sRx := pty(t)
	l := &line{bps: bps, noise: noise}
	go l.run(mUp, mRx, 1)
	go l.run(mRx, mUp, 2)
	q := testutil.Queue(t)
	r := &rig{up: sUp, rx: sRx, line: l, queueDir: q.Dir(), out: t.TempDir()}
	r.want = testutil.Fill(t, q, rand.New(rand.NewSource(int64(n*frames))), n, frames)
	r.cfg = filepath.Join(t.TempDir(), "unwound.toml")
	os.WriteFile(r.cfg, []byte(fmt.Sprintf(`[device]
id = "board-1"
[queue]
dir = %q
allow_volatile = true
[upload]
transport = "serial"
[serial]
port = %q
baud = 115200
`, q.Dir(), sUp)), 0o644)
	return r
}

func (r *rig) receiver(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	_, unwound := binaries(t)
	var stderr bytes.Buffer
	cmd := exec.Command(unwound, append([]string{"receive", "--port", r.rx, "--out", r.out}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &stderr
}

func (r *rig) uploader(t *testing.T, rto string, args ...string) *exec.Cmd {
	up, _ := binaries(t)
	cmd := exec.Command(up, append([]string{"--config", r.cfg}, args...)...)
	cmd.Env = append(os.Environ(), "UNWOUND_SERIAL_RTO="+rto)
	return cmd
}

func TestSerialOnceWithNoise(t *testing.T) {
	r := newRig(t, 6, 300, 0, true)
	rx, rxErr := r.receiver(t, "--count", "6", "--idle", "60s")
	out, err := r.uploader(t, "300ms", "--once").CombinedOutput()
	if err != nil {
		t.Fatalf("uploader: %v\n%s", err, out)
	}
	if err := rx.Wait(); err != nil {
		t.Fatalf("receiver: %v\n%s", err, rxErr)
	}
	t.Logf("uploader:\n%s\nreceiver:\n%s", out, rxErr)
	testutil.Received(t, r.out, r.want)
	if n := len(testutil.Entries(t, r.queueDir)); n != 0 {
		t.Fatalf("%d entries left", n)
	}
	if r.line.injected == 0 || !strings.Contains(rxErr.String(), "noise lines") {
		t.Fatal("no noise injected")
	}
}

func TestSerialCutAndResume(t *testing.T) {
	// Paced at 115200 baud so a transfer takes long enough to cut.
	r := newRig(t, 3, 6000, 11520, false)
	rx, rxErr := r.receiver(t, "--idle", "120s")
	_ = rx
	start := time.Now()

	// 1. Start, let it send for a while, then pull the cable for 3 s.
	up1 := r.uploader(t, "500ms", "--once", "--tries", "10")
	var up1Out bytes.Buffer
	up1.Stderr = &up1Out
	if err := up1.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	r.line.cut.Store(true)
	time.Sleep(3 * time.Second)
	r.line.cut.Store(false)
	// 2. Let it make progress again, then kill the uploader (the board
	// side closes; the entry in flight must stay queued).
	time.Sleep(1500 * time.Millisecond)
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
	out, err := r.uploader(t, "500ms", "--once", "--tries", "10").CombinedOutput()
	if err != nil {
		t.Fatalf("uploader: %v\n%s\nfirst run:\n%s\nreceiver:\n%s", err, out, up1Out.String(), rxErr)
	}
	elapsed := time.Since(start)
	testutil.Received(t, r.out, r.want)
	if n := len(testutil.Entries(t, r.queueDir)); n != 0 {
		t.Fatalf("%d entries left", n)
	}
	log := rxErr.String()
	t.Logf("first run:\n%s\nsecond run:\n%s\nreceiver:\n%s", up1Out.String(), out, log)
	if !resumed(log) {
		t.Fatal("no offer resumed from a non-zero offset")
	}
	if strings.Count(log, ": stored") != len(r.want) {
		t.Fatalf("stored %d times for %d reports", strings.Count(log, ": stored"), len(r.want))
	}
	t.Logf("%d reports, %d bytes, cut 3 s, kill and restart: %v", len(r.want), total(r.want), elapsed.Round(time.Millisecond))
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

// TestSerialThroughput115200 paces the line at 115200 baud (8N1: 11520
// bytes/s) and measures report bytes per second end to end.
func TestSerialThroughput115200(t *testing.T) {
	if testing.Short() {
		t.Skip("paced transfer")
	}
	r := newRig(t, 4, 8000, 11520, false)
	rx, rxErr := r.receiver(t, "--count", "4", "--idle", "60s")
	start := time.Now()
	out, err := r.uploader(t, "", "--once").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	d := time.Since(start)
	rx.Wait()
	testutil.Received(t, r.out, r.want)
	n := total(r.want)
	r.line.mu.Lock()
	wire := r.line.bytes
	r.line.mu.Unlock()
	t.Logf("%d report bytes in %v over a 115200-baud-paced pty: %.0f B/s (line carried %d bytes both ways, %.2f per report byte; %.0f%% of 11520 B/s)\n%s",
		n, d.Round(time.Millisecond), float64(n)/d.Seconds(), wire, float64(wire)/float64(n), 100*float64(n)/d.Seconds()/11520, rxErr)
}
