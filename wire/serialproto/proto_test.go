package serialproto

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"sync"
	"testing"
	"time"
)

func TestLineRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 100, MaxPayload} {
		p := make([]byte, n)
		rand.Read(p)
		line := AppendLine(nil, Frame{Type: TData, Seq: 77, Payload: p})
		if len(line) > MaxLine {
			t.Fatalf("line %d > MaxLine %d", len(line), MaxLine)
		}
		for _, c := range line[:len(line)-1] {
			if c < 0x20 || c >= 0x7f {
				t.Fatalf("byte %#x on the wire", c)
			}
		}
		f, err := DecodeLine(append([]byte("[  12.345] printk without newline "), line...))
		if err != nil || f.Type != TData || f.Seq != 77 || !bytes.Equal(f.Payload, p) {
			t.Fatalf("n=%d: %v %+v", n, err, f)
		}
		// Every single-byte change is detected.
		for i := len(Magic); i < len(line)-1; i += 7 {
			bad := append([]byte(nil), line...)
			bad[i] ^= 0x01
			if f, err := DecodeLine(bad); err == nil && bytes.Equal(f.Payload, p) && f.Seq == 77 {
				// base64 padding bits can flip without changing the data
				continue
			} else if err == nil {
				t.Fatalf("n=%d: corruption at %d not detected", n, i)
			}
		}
	}
	if _, err := DecodeLine([]byte("just a kernel message\n")); !errors.Is(err, ErrNoFrame) {
		t.Fatal(err)
	}
}

func TestReaderSkipsNoise(t *testing.T) {
	var in bytes.Buffer
	in.WriteString("[    0.000000] Booting Linux on physical CPU 0x0\r\n")
	in.Write(AppendLine(nil, Frame{Type: THello, Seq: 1, Payload: []byte("a")}))
	in.WriteString(string(bytes.Repeat([]byte("x"), 10000)) + "\n")
	in.WriteString("#UW1:garbage\n")
	line := AppendLine(nil, Frame{Type: TAck, Seq: 2, Payload: []byte("b")})
	in.Write(line[:len(line)-1])
	in.WriteString("\r\n")
	r := NewReader(&in)
	for i, want := range []uint32{1, 2} {
		f, err := r.Next()
		if err != nil || f.Seq != want {
			t.Fatalf("frame %d: %v %+v", i, err, f)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatal(err)
	}
	if r.Noise != 2 || r.Corrupt != 1 {
		t.Fatalf("noise %d corrupt %d", r.Noise, r.Corrupt)
	}
}

// lossyLine forwards lines from r to w, dropping a fraction, corrupting
// some and adding kernel-like noise.
func lossyLine(t *testing.T, r io.Reader, w io.WriteCloser, drop float64, seed int64) {
	rng := mrand.New(mrand.NewSource(seed))
	br := bufio.NewReader(r)
	defer w.Close()
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		x := rng.Float64()
		switch {
		case x < drop:
			continue
		case x < drop*1.5:
			line[len(line)/2] ^= 0x20
		case x < drop*2:
			w.Write([]byte(fmt.Sprintf("[%6d.%06d] usb 1-1: new device\n", rng.Intn(1000), rng.Intn(1e6))))
		}
		if _, err := w.Write(line); err != nil {
			return
		}
	}
}

type rw struct {
	io.Reader
	io.Writer
}

type memStore struct {
	mu  sync.Mutex
	got map[ID][]byte
	n   map[ID]int
}

func (m *memStore) Has(id ID) bool { m.mu.Lock(); defer m.mu.Unlock(); _, ok := m.got[id]; return ok }
func (m *memStore) Put(id ID, b []byte) (Status, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got[id] = append([]byte(nil), b...)
	m.n[id]++
	return Stored, "", nil
}

func TestTransferLossy(t *testing.T) {
	for _, drop := range []float64{0, 0.05, 0.2} {
		t.Run(fmt.Sprint(drop), func(t *testing.T) {
			upR, upW := io.Pipe()   // uploader writes
			rxR, rxW := io.Pipe()   // receiver reads
			rx2R, rx2W := io.Pipe() // receiver writes
			up2R, up2W := io.Pipe() // uploader reads
			go lossyLine(t, upR, rxW, drop, 1)
			go lossyLine(t, rx2R, up2W, drop, 2)
			st := &memStore{got: map[ID][]byte{}, n: map[ID]int{}}
			rc := NewReceiver(NewConn(rw{rxR, rx2W}), st, ReceiverOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go rc.Serve(ctx)
			s := NewSender(NewConn(rw{up2R, upW}), Options{RTO: 100 * time.Millisecond, Retries: 50})
			if err := s.Handshake(ctx); err != nil {
				t.Fatal(err)
			}
			var ids []ID
			for i := 0; i < 5; i++ {
				var id ID
				rand.Read(id[:])
				data := make([]byte, 1000+i*3000)
				rand.Read(data)
				st0, err := s.Send(ctx, id, data)
				// A lost done makes the next offer a duplicate: stored
				// once all the same (checked below).
				if err != nil || st0 != Stored && !(st0 == Duplicate && drop > 0) {
					t.Fatalf("report %d: %v %v", i, st0, err)
				}
				if !bytes.Equal(st.got[id], data) {
					t.Fatalf("report %d differs", i)
				}
				ids = append(ids, id)
				// Offering it again is a duplicate (or, to a sender that
				// offers it again at once, the second copy of the done
				// just sent): not stored again (checked below).
				if st1, err := s.Send(ctx, id, data); err != nil || st1 != Duplicate && st1 != Stored {
					t.Fatalf("again: %v %v", st1, err)
				}
			}
			for _, id := range ids {
				if st.n[id] != 1 {
					t.Fatalf("%v stored %d times", id, st.n[id])
				}
			}
		})
	}
}
