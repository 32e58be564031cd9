package loadtest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/syncbuf"
	"github.com/unwound-dev/unwound/testkit/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

const token = "t0ken"

// server is a running `unwound serve`.
type server struct {
	cmd *exec.Cmd
	url string
	dir string
	log *syncbuf.Buffer // its stderr
}

var listening = regexp.MustCompile(`listening on (https?://[0-9.:]+)`)

// startServe runs `unwound serve --dir dir` on a free loopback port, under
// the command wrap (e.g. unshare) when given, and waits until it listens.
// The process is killed when the test ends.
func startServe(t testing.TB, dir string, wrap []string, extra ...string) *server {
	t.Helper()
	return startWith(t, testbin.Build(t, "unwound", ""), dir, wrap, extra...)
}

// startServeBin is startServe with another unwound binary.
func startServeBin(t testing.TB, bin, dir string) *server {
	t.Helper()
	return startWith(t, bin, dir, nil)
}

func startWith(t testing.TB, bin, dir string, wrap []string, extra ...string) *server {
	t.Helper()
	args := append([]string{bin, "serve", "--listen", "127.0.0.1:0", "--dir", dir, "--token", token}, extra...)
	if wrap != nil {
		args = append(append([]string{}, wrap...), args...)
	}
	s := &server{dir: dir, log: &syncbuf.Buffer{}}
	s.cmd = exec.Command(args[0], args[1:]...)
	pr, pw := io.Pipe()
	s.cmd.Stderr = pw
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			s.log.Write([]byte(line + "\n"))
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		pw.Close()
	})
	select {
	case s.url = <-found:
	case <-time.After(30 * time.Second):
		t.Fatalf("unwound serve did not start:\n%s", s.log)
	}
	return s
}

// post sends body as a report upload and returns the status code.
func (s *server) post(t testing.TB, client *http.Client, body io.Reader, size int64, id string) int {
	t.Helper()
	req, err := http.NewRequest("POST", s.url+"/v1/reports", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if id != "" {
		req.Header.Set("X-Unwound-Report-Id", id)
	}
	if size > 1<<20 {
		// The answer to a body refused for its Content-Length comes
		// before the body is sent, not while the client is still
		// writing it into a closed connection.
		req.Header.Set("Expect", "100-continue")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Logf("post: %v", err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// alive checks that the server still takes a good report.
func (s *server) alive(t testing.TB, report []byte) {
	t.Helper()
	if code := s.post(t, http.DefaultClient, bytes.NewReader(report), int64(len(report)), ""); code != 201 && code != 200 {
		t.Fatalf("a good report after the bad ones: HTTP %d\n%s", code, s.log)
	}
}

// status reads a field of /proc/PID/status in KiB (VmRSS, VmHWM).
func status(pid int, field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return -1
}

// bomb is a zstd frame of n bytes of '0' in RLE blocks of 128 KiB (4
// bytes each: 1 GiB is 32 KiB of frame) with an 8 MiB window, declaring
// its content size in the header or not.
func bomb(n int64, declare bool) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd}
	if declare {
		b = append(b, 0xc0, 0x68) // FCS_Field_Size 8, window descriptor 2^23
		b = binary.LittleEndian.AppendUint64(b, uint64(n))
	} else {
		b = append(b, 0x00, 0x68)
	}
	const block = 128 << 10
	for n > 0 {
		size := int64(block)
		if n < size {
			size = n
		}
		n -= size
		h := uint32(size)<<3 | 1<<1 // RLE
		if n == 0 {
			h |= 1 // last block
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16), '0')
	}
	return b
}

// waitLog waits for the server's log to hold a line matching re after
// offset from.
func (s *server) waitLog(t testing.TB, from int, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if l := s.log.String(); len(l) >= from {
			if m := rx.FindString(l[from:]); m != "" {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("no log line matching %q in:\n%s", re, s.log.String()[from:])
	return ""
}

func pidOf(s *server) int { return s.cmd.Process.Pid }
