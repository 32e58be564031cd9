package collector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// Client is a running collector seen over HTTP: the read API (Reader)
// through its /api/ endpoints, and a receive.Sink that posts reports to
// it as an uploader does (what unwound receive --collector uses).
type Client struct {
	URL   string // the collector's base URL: http://host:8080
	Token string // bearer token, when the collector wants one
	HTTP  *http.Client
}

var (
	_ Reader       = (*Client)(nil)
	_ receive.Sink = (*Client)(nil)
)

func (c *Client) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 2 * time.Minute}
}

func (c *Client) do(method, path string, body io.Reader, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequest(method, strings.TrimRight(c.URL, "/")+path, body)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return c.client().Do(req)
}

// get decodes the JSON answer of a GET (or POST) into v.
func (c *Client) get(method, path string, v any) error {
	resp, err := c.do(method, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		err := fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
		if resp.StatusCode == http.StatusNotFound {
			err = fmt.Errorf("%w (%s)", ErrNotFound, msg)
		}
		return err
	}
	return json.Unmarshal(b, v)
}

// Groups asks GET /api/groups.
func (c *Client) Groups(f Filter) ([]Group, error) {
	q := query{}
	q.since(f.Since)
	q.str("release", f.Release)
	q.str("program", f.Program)
	q.str("device", f.Device)
	q.str("order", f.Order)
	q.num("signal", f.Signal)
	q.num("limit", f.Limit)
	var out []Group
	return out, c.get("GET", "/api/groups?"+url.Values(q).Encode(), &out)
}

// Group asks GET /api/groups/{id}.
func (c *Client) Group(id string) (*GroupDetail, error) {
	var out GroupDetail
	if err := c.get("GET", "/api/groups/"+url.PathEscape(id), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reports asks GET /api/reports.
func (c *Client) Reports(rq ReportQuery) ([]ReportInfo, error) {
	q := query{}
	q.str("group", rq.Group)
	q.since(rq.Since)
	q.num("limit", rq.Limit)
	var out []ReportInfo
	return out, c.get("GET", "/api/reports?"+url.Values(q).Encode(), &out)
}

// query is an API query string holding only what a filter sets: a zero
// value is left out, so the collector's default applies.
type query url.Values

func (q query) str(k, v string) {
	if v != "" {
		url.Values(q).Set(k, v)
	}
}

// num sets a count or a signal number: both are positive when set.
func (q query) num(k string, n int) {
	if n > 0 {
		url.Values(q).Set(k, strconv.Itoa(n))
	}
}

func (q query) since(t time.Time) {
	if !t.IsZero() {
		url.Values(q).Set("since", t.UTC().Format(time.RFC3339))
	}
}

// Report asks GET /api/reports/{id}.
func (c *Client) Report(id string) (*ReportDetail, error) {
	var out ReportDetail
	if err := c.get("GET", "/api/reports/"+url.PathEscape(id), &out); err != nil {
		return nil, err
	}
	fixResult(out.Result)
	return &out, nil
}

// Releases asks GET /api/releases.
func (c *Client) Releases() ([]ReleaseInfo, error) {
	var out []ReleaseInfo
	return out, c.get("GET", "/api/releases", &out)
}

// Values asks GET /api/values/{facet}.
func (c *Client) Values(facet string) ([]Facet, error) {
	var out []Facet
	return out, c.get("GET", "/api/values/"+url.PathEscape(facet), &out)
}

// Resymbolize asks POST /api/resymbolize.
func (c *Client) Resymbolize() (ResymbolizeResult, error) {
	var out ResymbolizeResult
	return out, c.get("POST", "/api/resymbolize", &out)
}

// Put posts a report as unwound-uploader does: 201 stored, 200
// duplicate, 4xx the report's fault (invalid), anything else a local
// error (the caller keeps the report and tries again).
func (c *Client) Put(data []byte, wantID string) (*report.Report, bool, error, error) {
	r, derr := decode.Report(data)
	if derr != nil {
		return nil, false, derr, nil
	}
	if wantID != "" && wantID != r.ID {
		return nil, false, fmt.Errorf("report id %s, but %s was announced", r.ID, wantID), nil
	}
	if !bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		data = report.Compress(data)
	}
	resp, err := c.do("POST", "/", bytes.NewReader(data), map[string]string{
		"Content-Type":        "application/json",
		"Content-Encoding":    "zstd",
		"X-Unwound-Report-Id": r.ID,
		"X-Unwound-Device-Id": r.DeviceID,
	})
	if err != nil {
		return r, false, nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode == http.StatusCreated:
		return r, true, nil, nil
	case resp.StatusCode == http.StatusOK:
		return r, false, nil, nil
	case resp.StatusCode == http.StatusBadRequest:
		return r, false, errors.New(strings.TrimSpace(string(msg))), nil
	}
	return r, false, nil, fmt.Errorf("collector %s: %s: %s", c.URL, resp.Status, strings.TrimSpace(string(msg)))
}

// Has is false: the collector deduplicates on Put.
func (c *Client) Has(string) bool { return false }

// List asks GET /reports.
func (c *Client) List() ([]receive.Stored, error) {
	var out []receive.Stored
	return out, c.get("GET", "/reports", &out)
}

func (c *Client) String() string { return c.URL }
