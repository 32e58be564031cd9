package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

// forwardProxy is a plain HTTP forward proxy that knows one made-up host
// name and sends its requests to a real `unwound serve`: an uploader that
// reaches the server at all went through the proxy, since that name
// resolves nowhere else.
type forwardProxy struct {
	name    string // the made-up host
	backend *url.URL
	used    atomic.Int64
}

func (p *forwardProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.URL.Hostname() != p.name {
		http.Error(w, "this proxy knows only "+p.name, http.StatusBadGateway)
		return
	}
	p.used.Add(1)
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.backend.Scheme, p.backend.Host
	out.Header.Del("Proxy-Connection")
	// Loopback: never proxied, whatever the environment says.
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// TestHTTPProxyFromEnvironment: with HTTP_PROXY set, the uploader sends
// every report through the proxy (the server's name resolves nowhere
// else) and the queue ends empty; with the same name in NO_PROXY it goes
// direct, fails to resolve the name, and keeps every report queued.
func TestHTTPProxyFromEnvironment(t *testing.T) {
	srv := startServe(t, t.TempDir())
	backend, err := url.Parse(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	const name = "reports.unwound.invalid"
	p := &forwardProxy{name: name, backend: backend}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: p}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	n := 20
	b := newHTTPBoard(t, n, 23, fmt.Sprintf("url = %q\ntimeout = \"5s\"", "http://"+name+"/v1/reports"))
	up, _ := binaries(t)
	run := func(env ...string) (string, error) {
		cmd := exec.Command(up, "--config", b.cfg, "--once")
		cmd.Env = append(cleanProxyEnv(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// NO_PROXY names the host: direct, unresolvable, nothing lost.
	out, _ := run("HTTP_PROXY=http://"+ln.Addr().String(), "NO_PROXY="+name)
	if p.used.Load() != 0 {
		t.Fatalf("NO_PROXY ignored: %d requests through the proxy\n%s", p.used.Load(), out)
	}
	if left := b.queued(t); left != n {
		t.Fatalf("%d of %d entries left after a failed direct attempt\n%s", left, n, out)
	}

	out, err = run("HTTP_PROXY=http://" + ln.Addr().String())
	if err != nil {
		t.Fatalf("%v\n%s\nserver:\n%s", err, out, srv.Log())
	}
	if got := p.used.Load(); got < int64(n) {
		t.Fatalf("%d requests through the proxy for %d reports", got, n)
	}
	if left := b.queued(t); left != 0 {
		t.Fatalf("%d entries left\n%s", left, out)
	}
	if got := strings.Count(srv.Log(), ": stored"); got != n {
		t.Fatalf("stored %d times", got)
	}
}

// cleanProxyEnv is the test's environment without proxy settings.
func cleanProxyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k := strings.ToUpper(kv[:strings.IndexByte(kv, '=')+1])
		switch k {
		case "HTTP_PROXY=", "HTTPS_PROXY=", "NO_PROXY=", "ALL_PROXY=":
			continue
		}
		env = append(env, kv)
	}
	return env
}
