package sentry

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/unwound-dev/unwound/host/sentry/sentrytest"
)

// fakeSentry is a real HTTP server standing in for Sentry's envelope
// endpoint: it checks the request as Relay would (path, auth, framing,
// the event against the schema) and, like Sentry, keeps the first event
// of an id and drops later copies.
type fakeSentry struct {
	srv     *httptest.Server
	key     string
	project string

	mu       sync.Mutex
	receipts int            // envelopes accepted
	stored   map[string]int // event id → times received
	order    []string       // event ids, first receipt order
	errs     []error        // what Relay would have refused
	refuse   map[string]int // event id → status to answer (a permanent 4xx)
	hang     chan struct{}  // when set, requests wait for it to close
}

func newFakeSentry(t *testing.T) *fakeSentry {
	s := &fakeSentry{key: "publickey1", project: "42", stored: map[string]int{}, refuse: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.mu.Lock()
		if s.hang != nil {
			close(s.hang)
			s.hang = nil
		}
		s.mu.Unlock()
		s.srv.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, err := range s.errs {
			t.Errorf("fake Sentry: %v", err)
		}
	})
	return s
}

// dsn is the DSN of this server, reached at addr (the server's own, or
// a proxy's).
func (s *fakeSentry) dsn(t *testing.T, addr string) *DSN {
	d, err := ParseDSN(fmt.Sprintf("http://%s@%s/%s", s.key, addr, s.project))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (s *fakeSentry) addr() string { return s.srv.Listener.Addr().String() }

func (s *fakeSentry) fail(w http.ResponseWriter, status int, format string, args ...any) {
	err := fmt.Errorf(format, args...)
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
	http.Error(w, err.Error(), status)
}

func (s *fakeSentry) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang != nil {
		<-hang
	}
	if r.Method != http.MethodPost || r.URL.Path != "/api/"+s.project+"/envelope/" {
		s.fail(w, http.StatusNotFound, "%s %s: not the envelope endpoint", r.Method, r.URL.Path)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != EnvelopeContentType {
		s.fail(w, http.StatusBadRequest, "content type %q", ct)
		return
	}
	auth := r.Header.Get("X-Sentry-Auth")
	if !strings.HasPrefix(auth, "Sentry ") || !strings.Contains(auth, "sentry_version=7") ||
		!strings.Contains(auth, "sentry_key="+s.key) || !strings.Contains(auth, "sentry_client=unwound/") {
		s.fail(w, http.StatusUnauthorized, "X-Sentry-Auth %q", auth)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the proxy cut it: no answer reaches anyone
	}
	env, err := ParseEnvelope(body)
	if err != nil {
		s.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	payload, err := env.Event()
	if err != nil {
		s.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	var ev struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		s.fail(w, http.StatusBadRequest, "event: %v", err)
		return
	}
	if env.Header["event_id"] != ev.EventID || !strings.Contains(fmt.Sprint(env.Header["dsn"]), s.key+"@") || env.Header["sent_at"] == nil {
		s.fail(w, http.StatusBadRequest, "envelope header %v for event %s", env.Header, ev.EventID)
		return
	}
	if err := sentrytest.Validate(payload); err != nil {
		s.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	s.mu.Lock()
	status := s.refuse[ev.EventID]
	if status == 0 {
		s.receipts++
		if s.stored[ev.EventID] == 0 {
			s.order = append(s.order, ev.EventID)
		}
		s.stored[ev.EventID]++
	}
	s.mu.Unlock()
	if status != 0 {
		http.Error(w, `{"detail":"refused"}`, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q}`, ev.EventID)
}

func (s *fakeSentry) counts() (receipts int, stored map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored = map[string]int{}
	for k, v := range s.stored {
		stored[k] = v
	}
	return s.receipts, stored
}

// fault is what the proxy does with one request.
type fault string

const (
	pass      fault = "pass"      // forward it and its answer
	reset     fault = "reset"     // reset the connection before forwarding: Sentry never sees it
	lost      fault = "lost"      // forward it, then reset instead of answering: Sentry has it, the forwarder does not know
	tooMany   fault = "429"       // answer 429 with Retry-After: 1
	rateLimit fault = "ratelimit" // answer 429 with X-Sentry-Rate-Limits for errors, 1 s
	status503 fault = "503"
	status500 fault = "500"
	status502 fault = "502"
)

// faultProxy is a real TCP proxy in front of the fake Sentry. It reads
// each HTTP request off the connection and does what the next fault in
// its script says; when the script is done it passes everything, or, with
// failAll, answers 503.
type faultProxy struct {
	ln      net.Listener
	backend string

	mu      sync.Mutex
	script  []fault
	failAll bool
	done    map[fault]int
}

func newFaultProxy(t *testing.T, backend string, script ...fault) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, backend: backend, script: script, done: map[fault]int{}}
	go p.accept()
	t.Cleanup(func() { ln.Close() })
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) next() fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := pass
	switch {
	case len(p.script) > 0:
		f, p.script = p.script[0], p.script[1:]
	case p.failAll:
		f = status503
	}
	p.done[f]++
	return f
}

func (p *faultProxy) setFailAll(v bool) {
	p.mu.Lock()
	p.failAll = v
	p.mu.Unlock()
}

func (p *faultProxy) counts() map[fault]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[fault]int{}
	for k, v := range p.done {
		m[k] = v
	}
	return m
}

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.conn(c.(*net.TCPConn))
	}
}

// resetConn closes with SO_LINGER 0: the peer gets a TCP RST.
func resetConn(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

func (p *faultProxy) conn(c *net.TCPConn) {
	defer c.Close()
	br := bufio.NewReader(c)
	var back net.Conn
	var bbr *bufio.Reader
	defer func() {
		if back != nil {
			back.Close()
		}
	}()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		f := p.next()
		switch f {
		case reset:
			resetConn(c)
			return
		case tooMany, rateLimit, status500, status502, status503:
			io.Copy(io.Discard, req.Body)
			code, hdr := 503, ""
			switch f {
			case tooMany:
				code, hdr = 429, "Retry-After: 1\r\n"
			case rateLimit:
				code, hdr = 429, "X-Sentry-Rate-Limits: 1:error:key, 60:transaction:key\r\n"
			case status500:
				code = 500
			case status502:
				code = 502
			}
			fmt.Fprintf(c, "HTTP/1.1 %d %s\r\n%sContent-Length: 0\r\n\r\n", code, http.StatusText(code), hdr)
			continue
		}
		if back == nil {
			if back, err = net.Dial("tcp", p.backend); err != nil {
				resetConn(c)
				return
			}
			bbr = bufio.NewReader(back)
		}
		if err := req.Write(back); err != nil {
			resetConn(c)
			return
		}
		resp, err := http.ReadResponse(bbr, req)
		if err != nil {
			resetConn(c)
			return
		}
		if f == lost {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			resetConn(c)
			return
		}
		err = resp.Write(c)
		resp.Body.Close()
		if err != nil {
			return
		}
	}
}
