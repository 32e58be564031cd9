package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// A browser cannot send a bearer header when it follows a link, and a
// token in a URL ends up in history, logs and Referer headers. So the page
// takes the token once, in a POSTed login form, and answers with a session
// cookie: the session's expiry and an HMAC-SHA256 of it under a secret
// the server draws at start. Nothing is stored on the server; restarting
// it (or changing the token, which needs a restart) ends every session.

const (
	cookieName = "unwound_session"
	// sessionLife is how long a login lasts.
	sessionLife = 12 * time.Hour
)

// auth decides who may read the page.
type auth struct {
	tokens [][]byte // any of these logs in; none: the page is open
	secret []byte   // the session cookies' HMAC key
	now    func() time.Time
}

func newAuth(tokens []string) (*auth, error) {
	a := &auth{secret: make([]byte, 32), now: time.Now}
	if _, err := rand.Read(a.secret); err != nil {
		return nil, err
	}
	for _, t := range tokens {
		if t != "" {
			a.tokens = append(a.tokens, []byte(t))
		}
	}
	return a, nil
}

// open says the page needs no login: no token is set.
func (a *auth) open() bool { return len(a.tokens) == 0 }

// tokenOK says t is one of the tokens, in time independent of where it
// differs.
func (a *auth) tokenOK(t string) bool {
	ok := 0
	for _, want := range a.tokens {
		ok |= subtle.ConstantTimeCompare([]byte(t), want)
	}
	return ok == 1
}

// allowed says r may read the page: the page is open, or r came over a
// verified client certificate (mutual TLS), or carries a bearer token, or
// a valid session cookie.
func (a *auth) allowed(r *http.Request) bool {
	if a.open() {
		return true
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && a.tokenOK(t) {
		return true
	}
	c, err := r.Cookie(cookieName)
	return err == nil && a.sessionOK(c.Value)
}

func (a *auth) sign(expiry string) string {
	m := hmac.New(sha256.New, a.secret)
	m.Write([]byte("unwound page session\x00" + expiry))
	return hex.EncodeToString(m.Sum(nil))
}

// session is a new session cookie's value: "expiry.mac".
func (a *auth) session() string {
	exp := strconv.FormatInt(a.now().Add(sessionLife).Unix(), 10)
	return exp + "." + a.sign(exp)
}

// sessionOK checks a session cookie's value: its MAC, then its expiry.
func (a *auth) sessionOK(v string) bool {
	exp, mac, ok := strings.Cut(v, ".")
	if !ok || len(exp) > 20 {
		return false
	}
	if !hmac.Equal([]byte(mac), []byte(a.sign(exp))) {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && a.now().Unix() < n
}

// setCookie logs the browser in (value set) or out (value empty). The
// cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's
// page sends it: the logout and login forms need no CSRF token), and
// Secure when the page is served over TLS.
func setCookie(w http.ResponseWriter, r *http.Request, value string) {
	c := &http.Cookie{
		Name: cookieName, Value: value, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.MaxAge = int(sessionLife / time.Second)
	}
	http.SetCookie(w, c)
}

// localPath is next if it is a path on this server, else "/": the login
// form's redirect must not lead to another site.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsRune(next, '\\') {
		return "/"
	}
	for _, c := range []byte(next) {
		if c < 0x20 || c == 0x7f {
			return "/"
		}
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}
