package receive

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGuardBusy: with every upload slot taken, the next upload waits
// Wait, then gets 503 with Retry-After; GETs are never held back.
func TestGuardBusy(t *testing.T) {
	release := make(chan struct{})
	inside := make(chan struct{}, 1)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			inside <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})
	var logs []string
	hs := httptest.NewServer(LimitUploads(next, Limits{MaxInFlight: 1, Wait: 50 * time.Millisecond, RetryAfter: 7 * time.Second},
		func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }))
	defer hs.Close()
	done := make(chan int)
	go func() {
		resp, err := http.Post(hs.URL, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-inside
	resp, err := http.Post(hs.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("second upload: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp, err := http.Get(hs.URL); err != nil || resp.StatusCode != 201 {
		t.Errorf("a GET while the slot is taken: %v %v", resp, err)
	}
	close(release)
	if code := <-done; code != 201 {
		t.Errorf("first upload: %d", code)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], "busy") {
		t.Errorf("log %q", logs)
	}
}

type sqliteErr int

func (e sqliteErr) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e sqliteErr) Code() int     { return int(e) }

func TestDiskFull(t *testing.T) {
	for err, want := range map[error]bool{
		&os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}: true,
		fmt.Errorf("commit: %w", syscall.EDQUOT):                   true,
		fmt.Errorf("commit: %w", sqliteErr(13)):                    true, // SQLITE_FULL
		sqliteErr(13 | 3<<8):                                       true,
		sqliteErr(5):                                               false, // SQLITE_BUSY
		&os.PathError{Op: "write", Path: "x", Err: syscall.EIO}:    false,
	} {
		if DiskFull(err) != want {
			t.Errorf("DiskFull(%v) = %v", err, !want)
		}
	}
}

// TestGuardSlowBody: a client that trickles its body loses its slot
// after BodyTimeout, and the next upload gets it.
func TestGuardSlowBody(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := ReadBody(w, r, 1<<20); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	hs := httptest.NewServer(LimitUploads(next, Limits{MaxInFlight: 1, Wait: 2 * time.Second, BodyTimeout: 100 * time.Millisecond}, t.Logf))
	defer hs.Close()
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
	time.Sleep(20 * time.Millisecond) // the slow upload has the slot
	start := time.Now()
	resp, err := http.Post(hs.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("upload after a trickling one: %s", resp.Status)
	}
	t.Logf("the next upload waited %v", time.Since(start).Round(time.Millisecond))
	reply, _ := io.ReadAll(conn)
	if !strings.Contains(string(reply), "400") {
		t.Errorf("the trickling upload got %q", reply)
	}
}
