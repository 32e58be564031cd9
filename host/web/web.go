// Package web is the collector's read-only page: the groups table, a
// group's trace, chart and counts, and one report's every thread. It is
// server-rendered html/template with its stylesheet embedded: no script,
// no build step, a few kilobytes a page, so it works with JavaScript off
// and on a slow link.
//
// Routes (patterns for http.ServeMux, Go 1.22):
//
//	GET  /                  the groups table: ?release=&program=&order=
//	GET  /group/{id}        one group
//	GET  /report/{id}       one report
//	GET  /login, POST /login, POST /logout
//	GET  /static/           the stylesheet
//
// Access is by the collector's tokens (the ingest token or a read token),
// through a login form and a session cookie, by a bearer header, or by a
// verified client certificate when the server asks for one (mutual TLS).
// See auth.go and docs/collector-page.md.
package web

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/host/symbolize"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure the page.
type Options struct {
	// Tokens log a browser in: the ingest token, a read token. With
	// none, the page is open (as the API is without --token).
	Tokens []string
	Log    func(format string, args ...any)
}

// Page serves the page from a collector's read API.
type Page struct {
	r     collector.Reader
	auth  *auth
	log   func(string, ...any)
	pages map[string]*template.Template
}

// Limits of what one page shows: the page stays small on a big fleet.
const (
	maxGroups  = 500
	maxReports = 200
)

// New makes the page for r.
func New(r collector.Reader, o Options) (*Page, error) {
	a, err := newAuth(o.Tokens)
	if err != nil {
		return nil, err
	}
	p := &Page{r: r, auth: a, log: o.Log, pages: map[string]*template.Template{}}
	if p.log == nil {
		p.log = func(string, ...any) {}
	}
	for _, name := range []string{"groups", "group", "report", "login", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/chart.html", "templates/frames.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		p.pages[name] = t
	}
	return p, nil
}

// Routes are the page's handlers by ServeMux pattern. None of them
// overlaps the ingest (POST to any other path, GET /reports) or /api/.
func (p *Page) Routes() map[string]http.Handler {
	static, _ := fs.Sub(staticFS, "static")
	return map[string]http.Handler{
		"GET /{$}":         p.guard(p.groups),
		"GET /group/{id}":  p.guard(p.group),
		"GET /report/{id}": p.guard(p.report),
		"GET /login":       http.HandlerFunc(p.loginForm),
		"POST /login":      http.HandlerFunc(p.login),
		"POST /logout":     http.HandlerFunc(p.logout),
		"GET /static/":     cacheFor(http.StripPrefix("/static/", http.FileServer(http.FS(static)))),
		"GET /robots.txt":  http.HandlerFunc(robots),
	}
}

func robots(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "User-agent: *\nDisallow: /\n")
}

// cacheFor lets browsers keep the stylesheet for an hour.
func cacheFor(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// guard sends a browser without access to the login form, and a client
// that is not a browser (no text/html in Accept) a 401.
func (p *Page) guard(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.auth.allowed(r) {
			if !strings.Contains(r.Header.Get("Accept"), "text/html") {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "log in at /login, or send the bearer token", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err := h(w, r); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, collector.ErrNotFound) {
				code = http.StatusNotFound
			} else if errors.Is(err, errBadRequest) {
				code = http.StatusBadRequest
			} else {
				p.log("page %s: %v", r.URL.Path, err)
			}
			p.render(w, r, code, "error", "Error", errorView{Code: code, Status: http.StatusText(code), Err: err.Error()})
		}
	})
}

var errBadRequest = errors.New("bad request")

type errorView struct {
	Code   int
	Status string
	Err    string
}

// view is what the layout gets: the page's title and data, and whether a
// logout button makes sense.
type view struct {
	Title  string
	Logout bool
	Data   any
}

// render executes a page into a buffer first, so a template error is a
// 500, not half a page.
func (p *Page) render(w http.ResponseWriter, r *http.Request, code int, name, title string, data any) {
	var buf bytes.Buffer
	_, noSession := r.Cookie(cookieName)
	v := view{Title: title, Logout: !p.auth.open() && noSession == nil, Data: data}
	if err := p.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		p.log("page %s: template %s: %v", r.URL.Path, name, err)
		http.Error(w, "cannot render the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	// No script runs on these pages, and nothing loads from elsewhere.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// loginView is the login form's data.
type loginView struct {
	Next  string
	Error string
	Open  bool
}

func (p *Page) loginForm(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	if p.auth.allowed(r) {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	p.render(w, r, http.StatusOK, "login", "Log in", loginView{Next: next})
}

// login checks the POSTed token and sets the session cookie. A wrong
// token costs a second, which makes guessing a long token hopeless.
func (p *Page) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	next := localPath(r.PostForm.Get("next"))
	if p.auth.open() {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !p.auth.tokenOK(r.PostForm.Get("token")) {
		p.log("page: a failed login from %s", r.RemoteAddr)
		time.Sleep(time.Second)
		p.render(w, r, http.StatusUnauthorized, "login", "Log in", loginView{Next: next, Error: "That is not the collector's token."})
		return
	}
	setCookie(w, r, p.auth.session())
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (p *Page) logout(w http.ResponseWriter, r *http.Request) {
	setCookie(w, r, "")
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// orders are the groups table's sort keys, as the column heads name them.
var orders = []struct{ Key, Head string }{
	{"boards", "Boards"}, {"count", "Reports"}, {"last", "Last seen"}, {"first", "First seen"},
}

// groupsView is the groups table's data.
type groupsView struct {
	Groups            []collector.Group
	Releases          []collector.ReleaseInfo
	Newest            string
	Release, Program  string
	Order             string
	Sort              map[string]string // order key: the link that sorts by it
	Programs          []string
	Truncated         bool
	Filtered          bool
	Reports, Boards   int
	ReleaseNotInStore bool
}

func (p *Page) groups(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	v := groupsView{Release: q.Get("release"), Program: strings.TrimSpace(q.Get("program")), Order: q.Get("order")}
	if v.Order == "" {
		v.Order = "boards"
	}
	known := false
	for _, o := range orders {
		known = known || o.Key == v.Order
	}
	if !known {
		return fmt.Errorf("%w: order %q: want boards, count, last or first", errBadRequest, v.Order)
	}
	var err error
	if v.Releases, err = p.r.Releases(); err != nil {
		return err
	}
	for _, rel := range v.Releases {
		if rel.Label != collector.Unknown {
			v.Newest = rel.Label // oldest first: the last is the newest
		}
	}
	// Newest first in the filter's menu.
	sort.SliceStable(v.Releases, func(i, j int) bool { return v.Releases[i].FirstSeen.After(v.Releases[j].FirstSeen) })
	gs, err := p.r.Groups(collector.Filter{Release: v.Release, Program: v.Program, Order: v.Order, Limit: maxGroups + 1})
	if err != nil {
		return err
	}
	if len(gs) > maxGroups {
		gs, v.Truncated = gs[:maxGroups], true
	}
	v.Groups = gs
	v.Filtered = v.Release != "" || v.Program != ""
	progs := map[string]bool{}
	for _, g := range gs {
		v.Reports += g.Count
		v.Boards += g.Boards
		for _, pr := range g.Programs {
			progs[path.Base(pr)] = true
		}
	}
	for pr := range progs {
		v.Programs = append(v.Programs, pr)
	}
	sort.Strings(v.Programs)
	v.Sort = map[string]string{}
	for _, o := range orders {
		u := url.Values{}
		if v.Release != "" {
			u.Set("release", v.Release)
		}
		if v.Program != "" {
			u.Set("program", v.Program)
		}
		if o.Key != "boards" {
			u.Set("order", o.Key)
		}
		v.Sort[o.Key] = "/"
		if len(u) > 0 {
			v.Sort[o.Key] = "/?" + u.Encode()
		}
	}
	p.render(w, r, http.StatusOK, "groups", "Crashes", v)
	return nil
}

// groupView is a group page's data.
type groupView struct {
	G         *collector.GroupDetail
	Sample    *collector.ReportDetail
	Crashed   *threadView
	Chart     *chart
	Reports   []collector.ReportInfo
	More      bool
	AttrKeys  []string
	SampleErr string
}

func (p *Page) group(w http.ResponseWriter, r *http.Request) error {
	g, err := p.r.Group(r.PathValue("id"))
	if err != nil {
		return err
	}
	if g.ID != strings.ToLower(r.PathValue("id")) {
		// Regrouping merged it: the address of the group it went into.
		http.Redirect(w, r, "/group/"+url.PathEscape(g.ID), http.StatusSeeOther)
		return nil
	}
	v := groupView{G: g, Chart: newChart(g.Days)}
	for k := range g.Attributes {
		v.AttrKeys = append(v.AttrKeys, k)
	}
	sort.Strings(v.AttrKeys)
	if g.Sample != "" {
		if v.Sample, err = p.r.Report(g.Sample); err != nil {
			v.SampleErr = err.Error()
		} else if v.Sample.Result != nil {
			for _, th := range threads(v.Sample.Result) {
				if th.Crashed {
					th := th
					v.Crashed = &th
					break
				}
			}
		}
	}
	if v.Reports, err = p.r.Reports(collector.ReportQuery{Group: g.ID, Limit: maxReports + 1}); err != nil {
		return err
	}
	if len(v.Reports) > maxReports {
		v.Reports, v.More = v.Reports[:maxReports], true
	}
	p.render(w, r, http.StatusOK, "group", g.Signature, v)
	return nil
}

// reportView is a report page's data.
type reportView struct {
	R       *collector.ReportDetail
	Threads []threadView
	Release string
	Attrs   []kv
}

type kv struct{ K, V string }

func (p *Page) report(w http.ResponseWriter, r *http.Request) error {
	d, err := p.r.Report(r.PathValue("id"))
	if err != nil {
		return err
	}
	v := reportView{R: d, Release: d.ReleaseInfo.Label()}
	if d.Result != nil {
		v.Threads = threads(d.Result)
	}
	for k, val := range d.Attributes {
		v.Attrs = append(v.Attrs, kv{k, val})
	}
	sort.Slice(v.Attrs, func(i, j int) bool { return v.Attrs[i].K < v.Attrs[j].K })
	p.render(w, r, http.StatusOK, "report", "Report "+d.ID, v)
	return nil
}

// threadView is one thread as the trace tables show it.
type threadView struct {
	TID        int
	Name       string
	Crashed    bool
	StopReason string
	StopDetail string
	Elided     int
	Frames     []frameView
}

// frameView is one frame: where the code is (innermost inlined call
// first), which module, and how the unwinder found it.
type frameView struct {
	N        int
	PC       string
	Withheld bool
	Locs     []symbolize.Location
	Module   string
	Trust    string
	Method   string
	Note     string
	Error    string
	Elided   int // frames dropped before this one
}

// threads are res's threads, the crashed one first.
func threads(res *symbolize.Result) []threadView {
	var out []threadView
	for _, th := range res.Threads {
		tv := threadView{TID: th.TID, Name: th.Name, Crashed: th.Crashed, StopReason: th.StopReason, StopDetail: th.StopDetail, Elided: th.Elided}
		for i, f := range th.Frames {
			fv := frameView{
				N: i, PC: fmt.Sprintf("%#x", uint64(f.PC)), Withheld: f.Withheld, Locs: f.Locations,
				Trust: f.Trust, Method: f.Method, Note: f.Note, Error: f.Error,
			}
			if th.Elided > 0 && i == th.ElidedAt {
				fv.Elided = th.Elided
			}
			if i >= th.ElidedAt && th.Elided > 0 {
				fv.N += th.Elided
			}
			if f.Module >= 0 && f.Module < len(res.Modules) {
				fv.Module = path.Base(res.Modules[f.Module].Path)
			}
			tv.Frames = append(tv.Frames, fv)
		}
		out = append(out, tv)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Crashed && !out[j].Crashed })
	return out
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() || t.Unix() == 0 {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04")
	},
	"iso":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"base": path.Base,
	"short": func(id string) string {
		if len(id) > 12 {
			return id[:12]
		}
		return id
	},
	"hex": func(v any) string {
		switch x := v.(type) {
		case interface{ String() string }:
			return x.String()
		}
		return fmt.Sprint(v)
	},
	"progs": progs,
	"releases": func(fs []collector.Facet) string {
		var b []string
		for _, f := range fs {
			b = append(b, f.Value)
		}
		return strings.Join(b, ", ")
	},
	"pct": func(n, total int) string {
		if total == 0 {
			return ""
		}
		return fmt.Sprintf("%d%%", (n*100+total/2)/total)
	},
	"add": func(a, b int) int { return a + b },
}

// progs names a group's programs by base name, each once, the first
// three and how many more.
func progs(ps []string) string {
	var names []string
	seen := map[string]bool{}
	for _, p := range ps {
		if b := path.Base(p); !seen[b] {
			seen[b] = true
			names = append(names, b)
		}
	}
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("+%d", len(names)-3))
	}
	return strings.Join(names, ", ")
}
