package sentry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/internal/version"
)

// Client posts envelopes to one DSN's project.
type Client struct {
	DSN  *DSN
	HTTP *http.Client // default: a client with a 30 s timeout
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Outcome is what to do after one attempt.
type Outcome int

const (
	Sent  Outcome = iota // 2xx: Sentry has the event
	Retry                // network error, reset, 5xx: try again after a backoff
	Wait                 // 429 or a rate limit on errors: try again after Result.After
	Drop                 // any other 4xx: Sentry will never take it
)

func (o Outcome) String() string {
	switch o {
	case Sent:
		return "sent"
	case Retry:
		return "retry"
	case Wait:
		return "rate limited"
	case Drop:
		return "dropped"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is one attempt's answer.
type Result struct {
	Outcome Outcome
	Status  int           // HTTP status, 0 on a network error
	After   time.Duration // with Wait, or a rate limit Sentry announced with a 2xx
	Err     error         // the network error, or the status and Sentry's message
}

// defaultRateLimit is the wait after a 429 that says nothing about how
// long (Sentry's SDKs wait 60 s).
const defaultRateLimit = 60 * time.Second

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// ClientName is sentry_client in X-Sentry-Auth and the User-Agent.
func ClientName() string { return "unwound/" + version.Version }

// Send posts one event as an envelope, once.
func (c *Client) Send(ctx context.Context, eventID string, payload []byte) Result {
	body := NewEnvelope(c.DSN, eventID, payload, c.now())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.DSN.EnvelopeURL(), bytes.NewReader(body))
	if err != nil {
		return Result{Outcome: Drop, Err: err}
	}
	req.Header.Set("Content-Type", EnvelopeContentType)
	req.Header.Set("X-Sentry-Auth", c.DSN.AuthHeader(ClientName()))
	req.Header.Set("User-Agent", ClientName())
	resp, err := c.http().Do(req)
	if err != nil {
		return Result{Outcome: Retry, Err: err}
	}
	msg, rerr := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	res := Result{Status: resp.StatusCode}
	limit, limited := RateLimit(resp.Header.Get("X-Sentry-Rate-Limits"), "error")
	switch {
	case resp.StatusCode/100 == 2:
		if rerr != nil {
			// The status came, the body did not: Sentry answered.
			rerr = nil
		}
		res.Outcome = Sent
		if limited {
			res.After = limit
		}
		return res
	case resp.StatusCode == http.StatusTooManyRequests:
		res.Outcome = Wait
		switch {
		case limited:
			res.After = limit
		default:
			if d, ok := RetryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
				res.After = d
			} else {
				res.After = defaultRateLimit
			}
		}
	case resp.StatusCode/100 == 5:
		res.Outcome = Retry
		if d, ok := RetryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
			res.After = d
		}
	case resp.StatusCode/100 == 4:
		res.Outcome = Drop
	default:
		res.Outcome = Retry // 1xx, 3xx: not an answer about the event
	}
	res.Err = fmt.Errorf("sentry: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	if rerr != nil && res.Outcome == Retry {
		res.Err = fmt.Errorf("sentry: HTTP %d: reading the answer: %w", resp.StatusCode, rerr)
	}
	return res
}

// RateLimit reads Sentry's X-Sentry-Rate-Limits header and returns how
// long events of the data category must wait: the longest of the quotas
// that name the category or no category (all of them). The header is a
// comma-separated list of quotas, each
// "retry_after:categories:scope[:reason_code[:namespaces]]", where
// retry_after is seconds and categories are separated by ";".
func RateLimit(header, category string) (time.Duration, bool) {
	var longest time.Duration
	found := false
	for _, q := range strings.Split(header, ",") {
		q = strings.TrimSpace(q)
		if q == "" {
			continue
		}
		parts := strings.Split(q, ":")
		secs, err := strconv.ParseFloat(strings.TrimSpace(parts[0]), 64)
		if err != nil || !(secs >= 0 && secs <= 30*24*3600) {
			continue // malformed quotas are ignored, as the SDKs do
		}
		applies := len(parts) < 2 || strings.TrimSpace(parts[1]) == ""
		if !applies {
			for _, c := range strings.Split(parts[1], ";") {
				if strings.TrimSpace(c) == category {
					applies = true
				}
			}
		}
		if !applies {
			continue
		}
		d := time.Duration(secs * float64(time.Second))
		if d > longest {
			longest = d
		}
		found = true
	}
	return longest, found
}

// RetryAfter reads a Retry-After header: seconds, or an HTTP date.
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if !(n >= 0 && n <= 30*24*3600) {
			return 0, false
		}
		return time.Duration(n * float64(time.Second)), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	if d > 30*24*time.Hour {
		return 0, false
	}
	return d, true
}

// SendRetrying sends one event until Sentry answers it for good (Sent or
// Drop) or ctx ends: after network errors and 5xx it backs off
// exponentially from lo to hi with jitter, after a 429 it waits as long
// as Sentry says. It returns the last answer.
func (c *Client) SendRetrying(ctx context.Context, eventID string, payload []byte, lo, hi time.Duration) Result {
	failures := 0
	for {
		res := c.Send(ctx, eventID, payload)
		if res.Outcome == Sent || res.Outcome == Drop {
			return res
		}
		d := res.After
		if res.Outcome == Retry {
			failures++
			if b := backoff(failures, lo, hi); b > d {
				d = b
			}
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			if res.Err == nil {
				res.Err = ctx.Err()
			}
			return res
		case <-t.C:
		}
	}
}
