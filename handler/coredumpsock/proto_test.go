package coredumpsock

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// req encodes a kernel request of size bytes (the known 16, then zeros).
func req(size, sizeAck uint32, mask uint64) []byte {
	b := make([]byte, max(size, 16))
	binary.NativeEndian.PutUint32(b, size)
	binary.NativeEndian.PutUint32(b[4:], sizeAck)
	binary.NativeEndian.PutUint64(b[8:], mask)
	return b[:size]
}

func TestParseRequest(t *testing.T) {
	all := uint64(Kernel | Userspace | Reject | Wait)
	r, err := ParseRequest(req(16, 16, all))
	if err != nil || r != (Request{16, 16, all}) {
		t.Fatalf("%+v %v", r, err)
	}
	if r.Choose() != Kernel|Wait {
		t.Errorf("Choose %#x", r.Choose())
	}
	// A later kernel: a larger request, a larger answer it takes, bits we
	// do not know. The answer stays ours: 16 bytes, known bits.
	r, err = ParseRequest(req(40, 32, all|1<<9))
	if err != nil || r.Choose() != Kernel|Wait {
		t.Fatalf("%+v %v", r, err)
	}
	ack, err := r.Ack(r.Choose())
	if err != nil || len(ack) != AckSizeVer0 || binary.NativeEndian.Uint32(ack) != AckSizeVer0 ||
		binary.NativeEndian.Uint32(ack[4:]) != 0 || binary.NativeEndian.Uint64(ack[8:]) != Kernel|Wait {
		t.Errorf("ack %x %v", ack, err)
	}
	if _, err := r.Ack(1 << 9); err != nil {
		t.Errorf("an offered bit refused: %v", err)
	}
	if _, err := (Request{16, 16, Kernel}).Ack(Wait); err == nil {
		t.Error("an answer with a bit not offered")
	}
	// No Wait offered: the core alone. No core offered: reject.
	if m := (Request{Mask: Kernel | Reject}).Choose(); m != Kernel {
		t.Errorf("no Wait: %#x", m)
	}
	if m := (Request{Mask: Userspace | Reject}).Choose(); m != Reject {
		t.Errorf("no Kernel: %#x", m)
	}
	for _, bad := range [][]byte{nil, {1, 2}, req(8, 16, all)[:8], req(16, 8, all), req(16, 16, all)[:12], append(req(16, 16, all), 0)} {
		if _, err := ParseRequest(bad); err == nil {
			t.Errorf("ParseRequest(%x) accepted", bad)
		}
	}
	big := make([]byte, 8)
	binary.NativeEndian.PutUint32(big, MaxReqSize+1)
	if _, err := ParseRequest(big); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("oversized: %v", err)
	}
}

func TestParseMark(t *testing.T) {
	for m := uint32(0); m < 6; m++ {
		b := binary.NativeEndian.AppendUint32(nil, m)
		if err := ParseMark(b); (err == nil) != (m == 0) {
			t.Errorf("mark %d: %v", m, err)
		}
	}
	if ParseMark([]byte{0, 0}) == nil {
		t.Error("short mark accepted")
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(req(16, 16, 15))
	f.Add(req(24, 16, 15))
	f.Add(req(8, 16, 15))
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		if r.Size < ReqSizeVer0 || int(r.Size) != len(b) || r.SizeAck < AckSizeVer0 {
			t.Fatalf("accepted %+v from %d bytes", r, len(b))
		}
		m := r.Choose()
		if m&^r.Mask != 0 {
			t.Fatalf("Choose %#x outside %#x", m, r.Mask)
		}
		if ack, err := r.Ack(m); err != nil || len(ack) != AckSizeVer0 {
			t.Fatalf("Ack: %x %v", ack, err)
		}
	})
}

// kernelSide is a socket pair: the server's end as handshake gets it,
// and the end a test writes as the kernel would.
func kernelSide(t *testing.T) (server *os.File, kernel *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.SetNonblock(fds[0], true)
	server = os.NewFile(uintptr(fds[0]), "server")
	kernel = os.NewFile(uintptr(fds[1]), "kernel")
	server.SetDeadline(time.Now().Add(5 * time.Second))
	t.Cleanup(func() { server.Close(); kernel.Close() })
	return server, kernel
}

// TestHandshake plays the kernel's side of fs/coredump.c over a socket
// pair: requests of the known size, a larger one (its tail read and
// ignored, the core after the verdict intact), a smaller one and one too
// large (no answer: the kernel then drops the core and frees the task),
// "@" (the core at once), and a refusing verdict.
func TestHandshake(t *testing.T) {
	const core = "\x7fELF\x02\x01\x01\x00rest of the core"
	all := uint64(Kernel | Userspace | Reject | Wait)
	for _, c := range []struct {
		name    string
		send    []byte
		mark    uint32
		wantErr string
	}{
		{"v0", req(16, 16, all), 0, ""},
		{"larger request and ack", req(48, 64, all), 0, ""},
		{"smaller request", req(12, 16, all), 0, "fewer than"},
		{"huge request", req(16, 16, all)[:4], 0, ""},
		{"refused", req(16, 16, all), 3, "UNSUPPORTED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			server, kernel := kernelSide(t)
			send := c.send
			if c.name == "huge request" {
				binary.NativeEndian.PutUint32(send, 1<<20)
				c.wantErr = "more than"
			}
			kernel.Write(send)
			type result struct {
				r   *Request
				err error
			}
			done := make(chan result, 1)
			go func() { r, err := handshake(server); done <- result{r, err} }()
			if c.wantErr == "" || c.mark != 0 {
				ack := make([]byte, AckSizeVer0)
				if _, err := io.ReadFull(kernel, ack); err != nil {
					t.Fatal(err)
				}
				if binary.NativeEndian.Uint32(ack) != AckSizeVer0 || binary.NativeEndian.Uint64(ack[8:]) != Kernel|Wait {
					t.Errorf("ack %x", ack)
				}
				kernel.Write(binary.NativeEndian.AppendUint32(nil, c.mark))
				kernel.Write([]byte(core))
			}
			res := <-done
			if c.wantErr != "" {
				if res.err == nil || !strings.Contains(res.err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", res.err, c.wantErr)
				}
				return
			}
			if res.err != nil || res.r == nil || res.r.Size != uint32(len(c.send)) {
				t.Fatalf("%+v %v", res.r, res.err)
			}
			got := make([]byte, len(core))
			if _, err := io.ReadFull(server, got); err != nil || string(got) != core {
				t.Errorf("the core after the verdict: %q %v", got, err)
			}
		})
	}
	t.Run("@", func(t *testing.T) {
		server, kernel := kernelSide(t)
		kernel.Write([]byte(core))
		r, err := handshake(server)
		if r != nil || err != nil {
			t.Fatalf("%+v %v", r, err)
		}
		got := make([]byte, len(core))
		if _, err := io.ReadFull(server, got); err != nil || !bytes.Equal(got, []byte(core)) {
			t.Errorf("the core was consumed: %q %v", got, err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		server, kernel := kernelSide(t)
		kernel.Close()
		if _, err := handshake(server); err == nil {
			t.Error("no error on a closed connection")
		}
	})
}

func TestCoreDumping(t *testing.T) {
	if !coreDumping([]byte("Name:\tx\nCoreDumping:\t1\nTHP_enabled:\t1\n")) || coreDumping([]byte("CoreDumping:\t0\n")) || coreDumping(nil) {
		t.Error("coreDumping")
	}
	// This process is not dumping core: the check refuses it.
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Skip(err)
	}
	defer unix.Close(fd)
	info, err := GetInfo(fd, infoCoredump)
	if err != nil {
		t.Skip(err) // before 6.13
	}
	if _, err := dumpMode(fd, os.Getpid(), info); err == nil {
		t.Error("a live process passed as dumping core")
	}
}
