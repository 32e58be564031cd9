package web

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// crash is the synthetic part of a test report.
type crash struct {
	n       int
	device  string
	exe     string
	signal  int
	offset  uint64
	version string
	hwRev   string
	time    time.Time
}

func (c crash) encode(t testing.TB) []byte {
	t.Helper()
	r := report.Report{
		Version: 1, ID: fmt.Sprintf("%032x", 0xfeed0000+c.n), Time: c.time.Unix(), TimeTrusted: true,
		DeviceID: c.device, Kernel: "6.1.0", Arch: "aarch64",
		Signal: report.Signal{Number: c.signal, Name: report.SignalName(c.signal)},
		PID:    100 + c.n, TID: 100 + c.n, Comm: filepath.Base(c.exe), Exe: c.exe,
		Modules: []report.Module{{Path: c.exe, BuildID: "00112233445566778899aabbccddeeff00112233", BuildIDKind: "gnu",
			Start: 0x400000, End: 0x500000, RuntimeOffset: 0x400000}},
		Threads: []report.Thread{{TID: 100 + c.n, Name: "worker", Crashed: true, StopReason: "end", Frames: []report.Frame{
			{PC: report.Hex(0x400000 + c.offset), Method: "context", Trust: "high", Exact: true},
			{PC: 0x400100, Method: "scan", Trust: "low"},
		}}},
	}
	r.Release = &report.Release{ImageID: "gw", ImageVersion: c.version}
	r.Device = &report.Device{Attributes: map[string]string{"hw_rev": c.hwRev}}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return report.Compress(js)
}

// fleet is a collector with three crash sites over two releases: site
// 0x10 on three boards in both, 0x20 on one board in 1.0, 0x30 (in a
// program whose name is markup) new in 1.1.
func fleet(t *testing.T) *collector.Collector {
	t.Helper()
	c, err := collector.Open(t.TempDir(), collector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	day := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var crashes []crash
	for i := 0; i < 6; i++ {
		crashes = append(crashes, crash{device: fmt.Sprintf("b%d", i%3), exe: "/usr/bin/gw", signal: 11, offset: 0x10, version: "1.0", hwRev: "A", time: day.AddDate(0, 0, i)})
	}
	crashes = append(crashes,
		crash{device: "b0", exe: "/usr/bin/gw", signal: 11, offset: 0x20, version: "1.0", hwRev: "B", time: day.AddDate(0, 0, 1)},
		crash{device: "b1", exe: "/usr/bin/gw", signal: 11, offset: 0x10, version: "1.1", hwRev: "B", time: day.AddDate(0, 0, 9)},
		crash{device: "b4", exe: "/usr/bin/<i>gw", signal: 6, offset: 0x30, version: "1.1", hwRev: "A", time: day.AddDate(0, 0, 10)},
		crash{device: "b4", exe: "/usr/bin/<i>gw", signal: 6, offset: 0x30, version: "1.1", hwRev: "A", time: day.AddDate(0, 0, 10)},
	)
	for i, cr := range crashes {
		cr.n = i
		if _, _, invalid, err := c.Put(cr.encode(t), ""); err != nil || invalid != nil {
			t.Fatalf("put %d: %v %v", i, err, invalid)
		}
	}
	return c
}

// server serves the page as unwound serve does: the page's routes beside
// a stand-in for the ingest at every other path.
func server(t *testing.T, c *collector.Collector, tokens ...string) *httptest.Server {
	t.Helper()
	p, err := New(c, Options{Tokens: tokens, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "ingest", http.StatusMethodNotAllowed)
	}))
	for pat, h := range p.Routes() {
		mux.Handle(pat, h)
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// browser is an HTTP client that keeps cookies and does not follow
// redirects, so each step is seen.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, cl *http.Client, u string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Accept", "text/html")
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestLoginSessionLogout(t *testing.T) {
	s := server(t, fleet(t), "ingest-tok", "read-tok")
	cl := browser(t)

	resp, _ := get(t, cl, s.URL+"/?release=gw+1.1")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?next=%2F%3Frelease%3Dgw%2B1.1" {
		t.Fatalf("no session: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	// Not a browser: a 401, not a redirect.
	resp, err := http.Get(s.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no session, no Accept: %s", resp.Status)
	}

	login := func(token, next string) *http.Response {
		resp, err := cl.PostForm(s.URL+"/login", url.Values{"token": {token}, "next": {next}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := login("nope", "/"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %s, cookies %v", resp.Status, resp.Cookies())
	}
	resp = login("read-tok", "//evil.example/")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %s to %q, want / (never another site)", resp.Status, resp.Header.Get("Location"))
	}
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Secure || ck[0].Path != "/" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure without TLS", ck)
	}
	if strings.Contains(ck[0].Value, "read-tok") {
		t.Fatalf("the cookie carries the token: %q", ck[0].Value)
	}
	resp, body := get(t, cl, s.URL+"/")
	if resp.StatusCode != 200 || !strings.Contains(body, `action="/logout"`) {
		t.Fatalf("with a session: %s", resp.Status)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(body, "<script") {
		t.Errorf("the page has a script")
	}

	// The ingest token logs in too; a tampered or expired cookie does not.
	if resp := login("ingest-tok", "/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("login with the ingest token: %s", resp.Status)
	}
	u, _ := url.Parse(s.URL)
	good := cl.Jar.Cookies(u)[0].Value
	// The MAC's last digit, changed (a fixed digit is the same one time
	// in sixteen).
	last := "0"
	if strings.HasSuffix(good, "0") {
		last = "1"
	}
	for name, v := range map[string]string{
		"tampered expiry": "9" + good,
		"tampered mac":    good[:len(good)-1] + last,
		"no mac":          strings.Split(good, ".")[0],
		"empty":           "",
	} {
		jar, _ := cookiejar.New(nil)
		jar.SetCookies(u, []*http.Cookie{{Name: cookieName, Value: v}})
		c2 := &http.Client{Jar: jar, CheckRedirect: cl.CheckRedirect}
		if resp, _ := get(t, c2, s.URL+"/"); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s cookie: %s, want the login redirect", name, resp.Status)
		}
	}

	resp, err = cl.PostForm(s.URL+"/logout", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ck := resp.Cookies(); len(ck) != 1 || ck[0].MaxAge >= 0 {
		t.Errorf("logout cookie %+v", ck)
	}
	if resp, _ := get(t, cl, s.URL+"/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after logout: %s", resp.Status)
	}

	// A bearer header reads the page without a session (curl, scripts).
	if resp, _ := testutil.Request(t, nil, "GET", s.URL+"/", "read-tok", nil); resp.StatusCode != 200 {
		t.Errorf("bearer: %s", resp.Status)
	}
}

// Expiry is checked after the MAC.
func TestSessionExpires(t *testing.T) {
	a, err := newAuth([]string{"t"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return now }
	v := a.session()
	if !a.sessionOK(v) {
		t.Fatal("a fresh session is refused")
	}
	now = now.Add(sessionLife + time.Second)
	if a.sessionOK(v) {
		t.Fatal("an expired session is accepted")
	}
	b, _ := newAuth([]string{"t"})
	b.now = a.now
	now = now.Add(-sessionLife)
	if b.sessionOK(v) {
		t.Fatal("another server's session is accepted")
	}
}

// With mutual TLS, a verified client certificate is the access: no login.
func TestClientCertificate(t *testing.T) {
	c := fleet(t)
	p, err := New(c, Options{Tokens: []string{"tok"}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pat, h := range p.Routes() {
		mux.Handle(pat, h)
	}
	// A self-signed client certificate, trusted by the server.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "board-fleet-viewer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	s := httptest.NewUnstartedServer(mux)
	s.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	s.StartTLS()
	defer s.Close()
	cl := s.Client()
	cl.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}
	if resp, _ := testutil.Request(t, cl, "GET", s.URL+"/", "", nil); resp.StatusCode != 200 {
		t.Fatalf("verified client certificate: %s", resp.Status)
	}
}

func TestGroupsTable(t *testing.T) {
	s := server(t, fleet(t))
	cl := browser(t)
	resp, body := get(t, cl, s.URL+"/")
	if resp.StatusCode != 200 {
		t.Fatalf("%s\n%s", resp.Status, body)
	}
	if strings.Contains(body, `action="/logout"`) {
		t.Errorf("an open page offers a logout")
	}
	rows := regexp.MustCompile(`<td class="sig"><a href="/group/([0-9a-f]+)">`).FindAllStringSubmatch(body, -1)
	if len(rows) != 3 {
		t.Fatalf("%d groups, want 3\n%s", len(rows), body)
	}
	// Markup from a report is text on the page.
	if strings.Contains(body, "<i>gw") || !strings.Contains(body, "&lt;i&gt;gw") {
		t.Errorf("a program named <i>gw is not escaped")
	}
	if n := strings.Count(body, `class="new"`); n != 1 {
		t.Errorf("%d groups marked new, want the one first seen in gw 1.1", n)
	}
	// Sort links keep the filters.
	_, body = get(t, cl, s.URL+"/?release=gw+1.0&program=gw")
	for _, want := range []string{`href="/?order=count&amp;program=gw&amp;release=gw&#43;1.0"`, `<option value="gw 1.0" selected>`} {
		if !strings.Contains(body, want) {
			t.Errorf("filtered page lacks %s", want)
		}
	}
	if n := strings.Count(body, `<td class="sig">`); n != 2 {
		t.Errorf("release gw 1.0: %d groups, want 2", n)
	}
	_, body = get(t, cl, s.URL+"/?order=first")
	first := regexp.MustCompile(`<td class="sig"><a href="/group/[0-9a-f]+">([^<]*)<`).FindStringSubmatch(body)
	if first == nil || !strings.Contains(body, `<span aria-sort="descending">First seen`) {
		t.Errorf("order=first: no sorted column")
	}
	if resp, _ := get(t, cl, s.URL+"/?order=evil"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("order=evil: %s", resp.Status)
	}
}

func TestGroupAndReportPages(t *testing.T) {
	c := fleet(t)
	s := server(t, c)
	cl := browser(t)
	gs, err := c.Groups(collector.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	top := gs[0]
	resp, body := get(t, cl, s.URL+"/group/"+top.ID)
	if resp.StatusCode != 200 {
		t.Fatalf("%s\n%s", resp.Status, body)
	}
	for _, want := range []string{
		`<table class="trace">`, `<span class="trust trust-high">high</span>`, `<span class="trust trust-low">low</span>`,
		`<svg class="chart"`, `data-day="2026-11-03" data-count="1"`, `data-day="2026-11-07" data-count="0"`,
		"By hw_rev", "By kernel", "6.1.0", "gw 1.0", "gw 1.1",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("group page lacks %s", want)
		}
	}
	// One bar a day from the first crash to the last, gaps included.
	if n := strings.Count(body, `<rect class="bar"`); n != 10 {
		t.Errorf("%d bars, want 10 days", n)
	}
	rep := regexp.MustCompile(`href="/report/([0-9a-f]{32})"`).FindStringSubmatch(body)
	if rep == nil {
		t.Fatal("no report link")
	}
	resp, body = get(t, cl, s.URL+"/report/"+rep[1])
	if resp.StatusCode != 200 {
		t.Fatalf("%s\n%s", resp.Status, body)
	}
	for _, want := range []string{"Thread", "worker", "crashed", "SIGSEGV", "hw_rev", "gw 1.", "/usr/bin/gw", "Modules"} {
		if !strings.Contains(body, want) {
			t.Errorf("report page lacks %s", want)
		}
	}
	for _, u := range []string{"/group/ffffffffffff", "/report/0123456789abcdef0123456789abcdef"} {
		if resp, _ := get(t, cl, s.URL+u); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %s, want 404", u, resp.Status)
		}
	}
	if resp, body := get(t, cl, s.URL+"/static/style.css"); resp.StatusCode != 200 || !strings.Contains(body, "svg.chart") {
		t.Errorf("stylesheet: %s", resp.Status)
	}
}

func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"/":                 "/",
		"/group/ab?x=1":     "/group/ab?x=1",
		"//evil.example":    "/",
		"/\\evil.example":   "/",
		"https://evil":      "/",
		"":                  "/",
		"/ok\r\nSet-Cookie": "/",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSession: a session cookie is outside input; no value but one the
// server signed passes, and none panics.
func FuzzSession(f *testing.F) {
	a, _ := newAuth([]string{"t"})
	good := a.session()
	f.Add(good)
	f.Add("")
	f.Add("1.")
	f.Add(strings.Repeat("9", 40) + "." + strings.Repeat("a", 64))
	f.Fuzz(func(t *testing.T, v string) {
		if a.sessionOK(v) && v != good {
			exp, _, _ := strings.Cut(v, ".")
			if v != exp+"."+a.sign(exp) {
				t.Fatalf("accepted %q", v)
			}
		}
	})
}

// FuzzLocalPath: the login redirect never leaves the server.
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/", "//x", "/\\x", "http://x", "/a?b=//c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := localPath(s)
		u, err := url.Parse(p)
		if err != nil || u.Host != "" || u.Scheme != "" || !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
			t.Fatalf("localPath(%q) = %q", s, p)
		}
	})
}
