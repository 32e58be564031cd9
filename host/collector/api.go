package collector

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/report"
)

// API serves the read API as JSON, for mounting under /api/ (behind the
// collector's token: receive.ServeOptions.Routes):
//
//	GET  /api/groups?since=&release=&program=&device=&signal=&order=&limit=   []Group
//	GET  /api/groups/{id}                 GroupDetail
//	GET  /api/groups/{id}/reports?limit=  []ReportInfo, newest first
//	GET  /api/reports?group=&since=&limit= []ReportInfo
//	GET  /api/reports/{id}                ReportDetail (the symbolized report)
//	GET  /api/reports/{id}/raw            the report as received (zstd)
//	GET  /api/releases                    []ReleaseInfo
//	GET  /api/values/{facet}              []Facet: program, device, kernel, arch, release, attr:KEY
//	POST /api/resymbolize                 ResymbolizeResult
//
// since is RFC 3339 or a duration before now (24h); signal a number or a
// name (SIGSEGV, SEGV). Errors are JSON {"error": "..."} with 400 (bad
// parameter), 404 (no such group or report) or 500.
func API(c *Collector) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/groups", func(w http.ResponseWriter, r *http.Request) {
		f, err := FilterFromQuery(r.URL.Query().Get)
		if err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		reply(w)(c.Groups(f))
	})
	mux.HandleFunc("GET /api/groups/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(c.Group(r.PathValue("id")))
	})
	mux.HandleFunc("GET /api/groups/{id}/reports", func(w http.ResponseWriter, r *http.Request) {
		q, err := reportQuery(r)
		if err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		q.Group = r.PathValue("id")
		reply(w)(c.Reports(q))
	})
	mux.HandleFunc("GET /api/reports", func(w http.ResponseWriter, r *http.Request) {
		q, err := reportQuery(r)
		if err != nil {
			apiError(w, http.StatusBadRequest, err)
			return
		}
		q.Group = r.URL.Query().Get("group")
		reply(w)(c.Reports(q))
	})
	mux.HandleFunc("GET /api/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(c.Report(r.PathValue("id")))
	})
	mux.HandleFunc("GET /api/reports/{id}/raw", func(w http.ResponseWriter, r *http.Request) {
		raw, err := c.Raw(r.PathValue("id"))
		if err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		w.Header().Set("Content-Type", "application/zstd")
		w.Write(raw)
	})
	mux.HandleFunc("GET /api/releases", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(c.Releases())
	})
	mux.HandleFunc("GET /api/values/{facet}", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(c.Values(r.PathValue("facet")))
	})
	mux.HandleFunc("POST /api/resymbolize", func(w http.ResponseWriter, r *http.Request) {
		reply(w)(c.Resymbolize())
	})
	return mux
}

// reply writes v as JSON, or err.
func reply(w http.ResponseWriter) func(any, error) {
	return func(v any, err error) {
		if err != nil {
			apiError(w, statusOf(err), err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	}
}

func statusOf(err error) int {
	if errors.Is(err, ErrNotFound) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func apiError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// FilterFromQuery reads a Filter from URL query parameters (get is
// url.Values.Get): since, release, program, device, signal, order, limit.
func FilterFromQuery(get func(string) string) (Filter, error) {
	var f Filter
	var err error
	if f.Since, err = ParseSince(get("since"), time.Now()); err != nil {
		return f, err
	}
	f.Release, f.Program, f.Device, f.Order = get("release"), get("program"), get("device"), get("order")
	if s := get("signal"); s != "" {
		if f.Signal, err = ParseSignal(s); err != nil {
			return f, err
		}
	}
	if s := get("limit"); s != "" {
		if f.Limit, err = strconv.Atoi(s); err != nil || f.Limit < 0 {
			return f, fmt.Errorf("limit %q: want a number", s)
		}
	}
	if _, ok := groupsOrder[f.Order]; !ok {
		return f, fmt.Errorf("order %q: want boards, count, last, first or signature", f.Order)
	}
	return f, nil
}

func reportQuery(r *http.Request) (ReportQuery, error) {
	var q ReportQuery
	var err error
	get := r.URL.Query().Get
	if q.Since, err = ParseSince(get("since"), time.Now()); err != nil {
		return q, err
	}
	if s := get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 0 {
			return q, fmt.Errorf("limit %q: want a number", s)
		}
	}
	return q, nil
}

// ParseSince reads a point in time: RFC 3339, a date (2026-11-26), or a
// duration before now (24h, 7d).
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if n, ok := cutSuffix(s, "d"); ok {
		if d, err := strconv.Atoi(n); err == nil && d >= 0 {
			return now.Add(-time.Duration(d) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("since %q: want RFC 3339, YYYY-MM-DD, or a duration (24h, 7d)", s)
}

func cutSuffix(s, suf string) (string, bool) {
	if len(s) > len(suf) && s[len(s)-len(suf):] == suf {
		return s[:len(s)-len(suf)], true
	}
	return s, false
}

// ParseSignal reads a signal number or name (11, SIGSEGV, segv).
func ParseSignal(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return n, nil
	}
	for n := 1; n < 32; n++ {
		name := signalName(n)
		if equalFoldSig(s, name) {
			return n, nil
		}
	}
	return 0, fmt.Errorf("signal %q: want a number or a name (SIGSEGV)", s)
}

func signalName(n int) string { return report.SignalName(n) }

func equalFoldSig(s, name string) bool {
	s = strings.ToUpper(s)
	return s == name || "SIG"+s == name
}
