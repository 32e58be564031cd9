package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/collectortest"
	"github.com/unwound-dev/unwound/testkit/testbin"
	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/uploader"
)

// HTTP end to end: the unwound-uploader binary against the `unwound serve`
// binary on loopback, directly, through a proxy that injects faults, or
// through the forward proxy the environment names.

// pki is a test CA writing PEM files into dir.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // the CA certificate's file
}

var serial int64 = 1

// newKey is a fresh P-256 key and a template named name, valid for a
// day from notBefore, with the next serial number.
func newKey(t *testing.T, name string, notBefore time.Time) (*ecdsa.PrivateKey, *x509.Certificate) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	return key, &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notBefore.Add(24 * time.Hour),
	}
}

func newCA(t *testing.T, name string) *pki {
	key, tmpl := newKey(t, name, time.Now().Add(-time.Hour))
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &pki{dir: t.TempDir(), cert: cert, key: key}
	ca.pem = ca.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *pki) write(t *testing.T, name, typ string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// leaf issues a certificate for 127.0.0.1 (server) or a client, valid
// from notBefore for a day; it returns the cert and key files.
func (ca *pki) leaf(t *testing.T, name string, client bool, notBefore time.Time) (certFile, keyFile string) {
	key, tmpl := newKey(t, name, notBefore)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, name+".pem", "CERTIFICATE", der), ca.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

// bulk is how many reports the HTTP end-to-end tests queue: 1,000, or 100
// with -short.
func bulk() int {
	if testing.Short() {
		return 100
	}
	return 1000
}

// server is a running `unwound serve --dir dir`.
type server struct {
	*testbin.Server
	url string
	dir string
}

func startServe(t *testing.T, dir string, args ...string) *server {
	srv := testbin.Collector(t, append([]string{"--dir", dir}, args...)...)
	return &server{Server: srv, url: srv.URL, dir: dir}
}

// collected checks that the collector in dir holds exactly the reports of
// want, byte-identical as they were queued.
func collected(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	c, list := collectortest.List(t, dir)
	if len(list) != len(want) {
		t.Fatalf("%s holds %d reports, want %d", dir, len(list), len(want))
	}
	for id, b := range want {
		got, err := c.Raw(id)
		if err != nil {
			t.Fatalf("report %s: %v", id, err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("report %s differs", id)
		}
	}
}

// httpBoard is a queue and an uploader configuration.
type httpBoard struct {
	dir  string // queue
	cfg  string
	want map[string][]byte
}

func newHTTPBoard(t *testing.T, n int, seed int64, upload string) *httpBoard {
	q := testutil.Queue(t)
	b := &httpBoard{dir: q.Dir()}
	b.want = testutil.Stage(t, q.Dir(), mrand.New(mrand.NewSource(seed)), 1, n, 20)
	b.config(t, upload)
	return b
}

// config writes the configuration with this [upload] section body.
func (b *httpBoard) config(t *testing.T, upload string) {
	b.cfg = testutil.Config(t, b.dir, "[device]\nid = \"board-7\"\n[upload]\ntransport = \"http\"\n"+upload+"\n")
}

func (b *httpBoard) once(t *testing.T, args ...string) (string, error) {
	up, _ := binaries(t)
	out, err := exec.Command(up, append([]string{"--config", b.cfg, "--once"}, args...)...).CombinedOutput()
	return string(out), err
}

// deliver uploads the queue to srv with --once and checks that every
// report arrived exactly once, byte-identical, and none is left queued;
// it returns how long the upload took.
func (b *httpBoard) deliver(t *testing.T, srv *server) time.Duration {
	t.Helper()
	start := time.Now()
	out, err := b.once(t)
	if err != nil {
		t.Fatalf("%v\n%s\nserver:\n%s", err, out, srv.Log())
	}
	d := time.Since(start)
	collected(t, srv.dir, b.want)
	if left := b.queued(t); left != 0 {
		t.Fatalf("%d entries left", left)
	}
	if got := strings.Count(srv.Log(), ": stored"); got != len(b.want) {
		t.Fatalf("stored %d times", got)
	}
	return d
}

func (b *httpBoard) queued(t *testing.T) int { return len(testutil.Entries(t, b.dir)) }

func (b *httpBoard) quarantined(t *testing.T) []string {
	d := filepath.Join(b.dir, uploader.QuarantineDir)
	if _, err := os.Stat(d); os.IsNotExist(err) {
		return nil
	}
	return testutil.Entries(t, d)
}

// listed is what GET /reports says.
func listed(t *testing.T, client *http.Client, url, token string) []string {
	resp, b := testutil.Request(t, client, "GET", url+"/reports", token, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /reports: %s", resp.Status)
	}
	var list []struct{ ID string }
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range list {
		ids = append(ids, r.ID)
	}
	return ids
}

// TestHTTPServeThousand: 1,000 queued reports over plain HTTP all arrive
// once, byte-identical; the queue ends empty; GET /reports lists them.
func TestHTTPServeThousand(t *testing.T) {
	srv := startServe(t, t.TempDir())
	n := bulk()
	b := newHTTPBoard(t, n, 11, fmt.Sprintf("url = %q\ntimeout = \"10s\"", srv.url+"/v1/reports"))
	d := b.deliver(t, srv)
	if ids := listed(t, http.DefaultClient, srv.url, ""); len(ids) != n {
		t.Fatalf("GET /reports lists %d", len(ids))
	}
	t.Logf("%d reports in %v", n, d.Round(time.Millisecond))
}

// TestHTTPServeTLS: HTTPS with certificates made here; a server signed by
// another CA, a missing token, a missing client certificate and a server
// certificate not valid yet (a board whose clock is not synced) all fail
// without losing or quarantining anything; with everything right, 1,000
// reports arrive over mutual TLS with a token.
func TestHTTPServeTLS(t *testing.T) {
	ca, other := newCA(t, "fleet"), newCA(t, "stranger")
	srvCert, srvKey := ca.leaf(t, "server", false, time.Now().Add(-time.Minute))
	cliCert, cliKey := ca.leaf(t, "board-7", true, time.Now().Add(-time.Minute))
	srv := startServe(t, t.TempDir(), "--tls-cert", srvCert, "--tls-key", srvKey, "--client-ca", ca.pem, "--token", "s3cret")
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	n := bulk()
	b := newHTTPBoard(t, n, 12, "")
	good := fmt.Sprintf("url = %q\nca_file = %q\nclient_cert = %q\nclient_key = %q\ntoken_file = %q\ntimeout = \"10s\"",
		srv.url, ca.pem, cliCert, cliKey, tok)

	refused := func(name, upload, why string) {
		t.Helper()
		b.config(t, upload)
		out, err := b.once(t, "--tries", "1")
		if err == nil {
			t.Fatalf("%s: upload succeeded:\n%s", name, out)
		}
		said := false
		for _, w := range strings.Split(why, "|") {
			said = said || strings.Contains(out, w)
		}
		if !said {
			t.Fatalf("%s: want %q in:\n%s", name, why, out)
		}
		if got := b.queued(t); got != n {
			t.Fatalf("%s: %d queued, want %d", name, got, n)
		}
		if q := b.quarantined(t); len(q) != 0 {
			t.Fatalf("%s: quarantined %v", name, q)
		}
	}
	refused("wrong CA", strings.Replace(good, ca.pem, other.pem, 1), "certificate signed by unknown authority")
	refused("no token", strings.Replace(good, fmt.Sprintf("token_file = %q", tok), "", 1), "HTTP 401")
	refused("no client certificate", strings.Replace(strings.Replace(good, fmt.Sprintf("client_cert = %q", cliCert), "", 1), fmt.Sprintf("client_key = %q", cliKey), "", 1), "certificate required|broken pipe|connection reset by peer|client conn could not be established")
	// (Go 1.22's client may see the server's refusal only as the write
	// of the request failing: TLS 1.3 sends the alert after the client's
	// handshake is done; over HTTP/2 as the connection "could not be
	// established".)

	// The board's clock is behind (not synced yet): the server's
	// certificate is "not yet valid". Temporary: nothing quarantined.
	early := startServe(t, t.TempDir(), append([]string{"--tls-cert"}, ca.leafArgs(t, "early", time.Now().Add(48*time.Hour))...)...)
	refused("clock not synced", strings.Replace(good, srv.url, early.url, 1), "certificate has expired or is not yet valid")
	early.Stop()

	b.config(t, good)
	d := b.deliver(t, srv)
	// The listing needs the client certificate and the token too.
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	kp, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}}}}
	if ids := listed(t, client, srv.url, "s3cret"); len(ids) != n {
		t.Fatalf("GET /reports lists %d", len(ids))
	}
	t.Logf("%d reports over mutual TLS in %v", n, d.Round(time.Millisecond))
}

// leafArgs issues a server certificate valid from notBefore and returns
// serve's "CERT --tls-key KEY" arguments.
func (ca *pki) leafArgs(t *testing.T, name string, notBefore time.Time) []string {
	c, k := ca.leaf(t, name, false, notBefore)
	return []string{c, "--tls-key", k}
}

// fault is what the proxy does with one request.
type fault int

const (
	pass      fault = iota
	resetBody       // read half the body, then reset the connection
	err500          // answer 500
	slowDown        // answer 429 with Retry-After: 1
	blackHole       // read the request, never answer
	lostReply       // forward it (the server stores it), then reset instead of answering
	reject          // answer 422: a permanent refusal of this report
)

func (f fault) String() string {
	return [...]string{"pass", "reset mid-body", "500", "429 Retry-After", "black hole", "reply lost", "422"}[f]
}

// canned are the proxy's answers to the faults that are a response.
var canned = map[fault]string{
	err500:   "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops\n",
	slowDown: "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
	reject:   "HTTP/1.1 422 Unprocessable Entity\r\nContent-Length: 8\r\n\r\nnot ours",
}

// proxy forwards HTTP/1.1 requests to backend, injecting plan's faults.
type proxy struct {
	ln      net.Listener
	backend string
	plan    func(n int, id string) fault
	mu      sync.Mutex
	seen    []time.Time
	faults  map[fault]int
	after   map[fault][]int // numbers of the requests right after each fault
}

func newProxy(t *testing.T, backend string, plan func(n int, id string) fault) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend, plan: plan, faults: map[fault]int{}, after: map[fault][]int{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.conn(c)
		}
	}()
	return p
}

func (p *proxy) conn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		id := req.Header.Get("X-Unwound-Report-Id")
		p.mu.Lock()
		n := len(p.seen)
		p.seen = append(p.seen, time.Now())
		f := p.plan(n, id)
		if f != pass {
			p.faults[f]++
			p.after[f] = append(p.after[f], n+1)
		}
		p.mu.Unlock()
		reset := func() {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
		if resp, ok := canned[f]; ok {
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, resp)
			continue
		}
		switch f {
		case resetBody:
			io.CopyN(io.Discard, req.Body, req.ContentLength/2)
			reset()
			return
		case blackHole:
			io.Copy(io.Discard, req.Body)
			io.Copy(io.Discard, c) // until the client gives up
			return
		}
		body, _ := io.ReadAll(req.Body)
		out, _ := http.NewRequest(req.Method, p.backend+req.URL.RequestURI(), bytes.NewReader(body))
		out.Header = req.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			reset()
			return
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if f == lostReply {
			reset()
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n", resp.Status, len(rb))
		c.Write(rb)
	}
}

// TestHTTPFaultProxy: 1,000 reports through a proxy that resets
// connections mid-body, answers 500 and 429 (Retry-After: 1), swallows a
// request (black hole), loses a reply after the server stored the report,
// and refuses one report for good (422). Every other report arrives
// exactly once; the refused one is quarantined; every fault costs one
// request and no more.
func TestHTTPFaultProxy(t *testing.T) {
	rxDir := t.TempDir()
	srv := startServe(t, rxDir)
	n := bulk()
	b := newHTTPBoard(t, n, 13, "")
	refused := ""
	for id := range b.want {
		if refused == "" || id < refused {
			refused = id
		}
	}
	// Faults by the number of the request among those for the other
	// reports (the refused one is refused every time).
	schedule := map[int]fault{}
	for i, f := range []fault{resetBody, err500, slowDown, blackHole, lostReply, resetBody, err500, slowDown, blackHole, lostReply} {
		schedule[n/25+i*n*9/100] = f
	}
	others := 0
	p := newProxy(t, srv.url, func(n int, id string) fault {
		if id == refused {
			return reject
		}
		others++
		return schedule[others-1]
	})
	b.config(t, fmt.Sprintf("url = %q\ntimeout = \"1s\"", "http://"+p.ln.Addr().String()+"/v1/reports"))
	start := time.Now()
	out, err := b.once(t, "--tries", "20", "--backoff", "20ms")
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%v\n%s\nserver:\n%s", err, out, srv.Log())
	}
	rejected := b.want[refused]
	delete(b.want, refused)
	collected(t, rxDir, b.want)
	if left := b.queued(t); left != 0 {
		t.Fatalf("%d entries left", left)
	}
	q := b.quarantined(t)
	if len(q) != 1 {
		t.Fatalf("quarantined %v, want the refused report", q)
	}
	if got, _ := os.ReadFile(filepath.Join(b.dir, uploader.QuarantineDir, q[0])); !bytes.Equal(got, rejected) {
		t.Fatal("the quarantined entry is not the refused report")
	}
	log := srv.Log()
	if got := strings.Count(log, ": stored"); got != n-1 {
		t.Fatalf("stored %d times, want %d", got, n-1)
	}
	// The replies lost after storing come back as duplicates.
	if got := strings.Count(log, ": duplicate"); got != 2 {
		t.Fatalf("%d duplicates, want 2 (the lost replies)", got)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	nf := 0
	for f, k := range p.faults {
		nf += k
		t.Logf("%-16v %d", f, k)
	}
	if len(p.faults) != 6 || nf != 11 {
		t.Fatalf("faults injected: %v", p.faults)
	}
	// Bounded: one request per report, one more per fault.
	if len(p.seen) != n+10 {
		t.Fatalf("%d requests for %d reports and 10 transient faults", len(p.seen), n)
	}
	// Retry-After: 1 was honoured although the backoff is 20 ms.
	for _, n := range p.after[slowDown] {
		if gap := p.seen[n].Sub(p.seen[n-1]); gap < time.Second {
			t.Fatalf("request %d came %v after a 429 with Retry-After: 1", n, gap)
		}
	}
	if len(p.after[slowDown]) != 2 {
		t.Fatalf("no request after the 429s: %v", p.after)
	}
	t.Logf("%d reports, 11 faults, %d requests in %v", n, len(p.seen), d.Round(time.Millisecond))
}

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
