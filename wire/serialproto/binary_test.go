package serialproto

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	mrand "math/rand"
	"sync/atomic"
	"testing"
	"time"
)

func TestBinaryRoundTrip(t *testing.T) {
	payloads := [][]byte{nil, {0}, {0, 0, 0}, bytes.Repeat([]byte{0xff}, MaxPayload)}
	for _, n := range []int{1, 253, 254, 255, 508, 509, 1000, MaxPayload} {
		p := make([]byte, n)
		rand.Read(p)
		payloads = append(payloads, p, bytes.Repeat([]byte{7}, n))
	}
	for _, p := range payloads {
		wire := AppendBinary(nil, Frame{Type: TData, Seq: 0x00ff0000, Payload: p})
		if wire[0] != 0 || wire[len(wire)-1] != 0 || bytes.IndexByte(wire[1:len(wire)-1], 0) >= 0 {
			t.Fatalf("n=%d: zero byte inside the frame", len(p))
		}
		if len(wire)-2 > maxCOBS {
			t.Fatalf("n=%d: %d bytes > maxCOBS %d", len(p), len(wire)-2, maxCOBS)
		}
		f, err := DecodeBinary(wire[1 : len(wire)-1])
		if err != nil || !f.Binary || f.Type != TData || f.Seq != 0x00ff0000 || !bytes.Equal(f.Payload, p) {
			t.Fatalf("n=%d: %v %+v", len(p), err, f)
		}
		// Every single-bit change is detected (CRC-32, or the COBS
		// structure breaks).
		for i := 1; i < len(wire)-1; i += 5 {
			bad := append([]byte(nil), wire[1:len(wire)-1]...)
			bad[i-1] ^= 1 << (i % 8)
			if _, err := DecodeBinary(bad); err == nil {
				t.Fatalf("n=%d: corruption at %d not detected", len(p), i)
			}
		}
	}
	// Overhead: a full frame costs the header, the CRC, the COBS codes
	// and two delimiters.
	full := AppendBinary(nil, Frame{Type: TData, Payload: make([]byte, MaxPayload)})
	line := AppendLine(nil, Frame{Type: TData, Payload: make([]byte, MaxPayload)})
	t.Logf("a %d-byte payload: %d bytes binary, %d text", MaxPayload, len(full), len(line))
}

// TestReaderBothFramings: text lines, binary frames (whose bytes include
// '\n' and the magic), kernel messages and damaged frames in one stream.
func TestReaderBothFramings(t *testing.T) {
	var in bytes.Buffer
	in.WriteString("[    0.000000] Booting Linux on physical CPU 0x0\r\n")
	in.Write(AppendLine(nil, Frame{Type: THello, Seq: 1, Payload: []byte("a")}))
	in.Write(AppendBinary(nil, Frame{Type: TData, Seq: 2, Payload: []byte("\n\n#UW1:\nx\x00\x00")}))
	in.WriteString("login: ")
	in.Write(AppendBinary(nil, Frame{Type: TAck, Seq: 3, Payload: bytes.Repeat([]byte{'\n'}, 600)}))
	bad := AppendBinary(nil, Frame{Type: TAck, Seq: 99, Payload: []byte("damaged")})
	bad[5] ^= 0x40
	in.Write(bad)
	in.Write(bytes.Repeat([]byte{1}, 5000)) // too long for a frame
	in.WriteByte(0)
	// A kernel message right before a binary frame, without a newline.
	in.WriteString("[   12.5] EXT4-fs (mmcblk0p2): recovery complete")
	in.Write(AppendBinary(nil, Frame{Type: TDone, Seq: 4, Payload: []byte("d")}))
	in.Write(AppendLine(nil, Frame{Type: TEmpty, Seq: 5}))
	r := NewReader(&in)
	for i, want := range []struct {
		seq uint32
		bin bool
	}{{1, false}, {2, true}, {3, true}, {4, true}, {5, false}} {
		f, err := r.Next()
		if err != nil || f.Seq != want.seq || f.Binary != want.bin {
			t.Fatalf("frame %d: %v %+v", i, err, f)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatal(err)
	}
	if r.Corrupt < 2 {
		t.Fatalf("noise %d corrupt %d", r.Noise, r.Corrupt)
	}
}

// frameRelay carries a stream, binary frames whole (0x00 ... 0x00), and
// drops the binary frames drop selects; text passes as it is.
func frameRelay(r io.Reader, w io.WriteCloser, drop func(Frame) bool) {
	defer w.Close()
	buf := make([]byte, 1)
	var cur []byte
	in := false
	for {
		if _, err := r.Read(buf); err != nil {
			return
		}
		c := buf[0]
		switch {
		case c == 0 && !in:
			in, cur = true, cur[:0]
		case c == 0 && len(cur) == 0:
		case c == 0:
			f, err := DecodeBinary(cur)
			if err != nil || !drop(f) {
				w.Write(append(append([]byte{0}, cur...), 0))
			}
			in = false
		case in:
			cur = append(cur, c)
		default:
			w.Write(buf)
		}
	}
}

// session joins a sender and a receiver through relays up (uploader to
// receiver) and down.
func session(t *testing.T, opt Options, up, down func(io.Reader, io.WriteCloser)) (*Sender, *memStore) {
	upR, upW := io.Pipe()
	rxR, rxW := io.Pipe()
	rx2R, rx2W := io.Pipe()
	up2R, up2W := io.Pipe()
	go up(upR, rxW)
	go down(rx2R, up2W)
	st := &memStore{got: map[ID][]byte{}, n: map[ID]int{}}
	rc := NewReceiver(NewConn(rw{rxR, rx2W}), st, ReceiverOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); upW.Close(); rx2W.Close() })
	go rc.Serve(ctx)
	s := NewSender(NewConn(rw{up2R, upW}), opt)
	if err := s.Handshake(ctx); err != nil {
		t.Fatal(err)
	}
	return s, st
}

func copyAll(r io.Reader, w io.WriteCloser) { io.Copy(w, r); w.Close() }

// TestSelectiveResend: data frames lost in the middle of a window are
// resent alone, not with everything after them.
func TestSelectiveResend(t *testing.T) {
	// The first sending of the 3rd, 7th and 8th chunk is lost.
	dropped := map[uint32]bool{}
	drop := func(f Frame) bool {
		if f.Type != TData {
			return false
		}
		d, _ := ParseData(f.Payload)
		if (d.Offset == 2048 || d.Offset == 6144 || d.Offset == 7168) && !dropped[d.Offset] {
			dropped[d.Offset] = true
			return true
		}
		return false
	}
	s, st := session(t, Options{Binary: true, RTO: 2 * time.Second, MinChunk: 1024},
		func(r io.Reader, w io.WriteCloser) { frameRelay(r, w, drop) }, copyAll)
	var id ID
	rand.Read(id[:])
	data := make([]byte, 40*1024)
	rand.Read(data)
	start := time.Now()
	status, err := s.Send(context.Background(), id, data)
	if err != nil || status != Stored || !bytes.Equal(st.got[id], data) {
		t.Fatalf("%v %v", status, err)
	}
	if s.Resent != 3 {
		t.Fatalf("%d frames resent for 3 lost", s.Resent)
	}
	// Found by the acks that follow, not by a timeout.
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v: waited for a timeout", d)
	}
}

// TestChunkFollowsLine: on a noisy line the chunk shrinks; on a clean one
// it grows back to the negotiated size. Both framings.
func TestChunkFollowsLine(t *testing.T) {
	if testing.Short() {
		t.Skip("about 100 KB through a noisy and a clean line")
	}
	for _, bin := range []bool{false, true} {
		var rate atomic.Value
		rate.Store(2e-3)
		relay := func(seed int64) func(io.Reader, io.WriteCloser) {
			return func(r io.Reader, w io.WriteCloser) {
				defer w.Close()
				rng := mrand.New(mrand.NewSource(seed))
				buf := make([]byte, 4096)
				for {
					n, err := r.Read(buf)
					if err != nil {
						return
					}
					out := buf[:0]
					p := rate.Load().(float64)
					for _, c := range buf[:n] {
						switch x := rng.Float64(); {
						case x < p:
							continue
						case x < 2*p:
							c ^= 1 << rng.Intn(8)
						}
						out = append(out, c)
					}
					if _, err := w.Write(out); err != nil {
						return
					}
				}
			}
		}
		s, st := session(t, Options{Binary: bin, RTO: 200 * time.Millisecond, Retries: 50}, relay(1), relay(2))
		send := func(size int) {
			t.Helper()
			var id ID
			rand.Read(id[:])
			data := make([]byte, size)
			rand.Read(data)
			status, err := s.Send(context.Background(), id, data)
			if err != nil || status != Stored && status != Duplicate || !bytes.Equal(st.got[id], data) {
				t.Fatalf("binary %v: %v %v", bin, status, err)
			}
		}
		max := s.opt.Chunk
		var noisyChunks []int
		for i := 0; i < 3; i++ {
			send(8000)
			noisyChunks = append(noisyChunks, s.Chunks)
		}
		rate.Store(0.0)
		send(40000)
		send(40000)
		t.Logf("binary %v: max %d, chunk after noisy reports %v, after clean ones %d", bin, max, noisyChunks, s.Chunks)
		for _, c := range noisyChunks {
			if c > max/2 {
				t.Fatalf("binary %v: chunk %d on a noisy line (max %d)", bin, c, max)
			}
		}
		if s.Chunks != max {
			t.Fatalf("binary %v: chunk %d on a clean line, want %d", bin, s.Chunks, max)
		}
	}
}
