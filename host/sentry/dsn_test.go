package sentry

import (
	"strings"
	"testing"
	"time"
)

func TestParseDSN(t *testing.T) {
	for _, c := range []struct{ dsn, url, auth string }{
		{"https://abc123@o4504.ingest.us.sentry.io/4505", "https://o4504.ingest.us.sentry.io/api/4505/envelope/", "Sentry sentry_version=7, sentry_key=abc123, sentry_client=unwound/dev"},
		{"http://key@sentry.lan:9000/3", "http://sentry.lan:9000/api/3/envelope/", "Sentry sentry_version=7, sentry_key=key, sentry_client=unwound/dev"},
		{"https://key:secret@example.com/sentry/prefix/17/", "https://example.com/sentry/prefix/api/17/envelope/", "Sentry sentry_version=7, sentry_key=key, sentry_client=unwound/dev, sentry_secret=secret"},
		{"  https://k@[::1]:8000/1\n", "https://[::1]:8000/api/1/envelope/", "Sentry sentry_version=7, sentry_key=k, sentry_client=unwound/dev"},
	} {
		d, err := ParseDSN(c.dsn)
		if err != nil {
			t.Errorf("%q: %v", c.dsn, err)
			continue
		}
		if got := d.EnvelopeURL(); got != c.url {
			t.Errorf("%q: envelope URL %s, want %s", c.dsn, got, c.url)
		}
		if got := d.AuthHeader(ClientName()); got != c.auth {
			t.Errorf("%q: auth %q, want %q", c.dsn, got, c.auth)
		}
	}
	for dsn, want := range map[string]string{
		"":                          "empty",
		"o1.ingest.sentry.io/1":     "no scheme",
		"ftp://k@h/1":               "scheme ftp",
		"https://h/1":               "no public key",
		"https://k@/1":              "no host",
		"https://k@h":               "no project id",
		"https://k@h/":              "no project id",
		"https://k@h/abc":           "project id abc",
		"https://k@h/1?x=1":         "query",
		"https://k:s@h/1#frag":      "fragment",
		"https://secretkey@h:bad/1": "invalid port",
		"https://k@h/%zz":           "invalid URL escape",
	} {
		_, err := ParseDSN(dsn)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDSN(%q) = %v, want an error saying %q", dsn, err, want)
		}
		if err != nil && strings.Contains(dsn, "secretkey") && strings.Contains(err.Error(), "secretkey") {
			t.Errorf("error shows the key: %v", err)
		}
	}
}

func TestRateLimit(t *testing.T) {
	for _, c := range []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"60:error:key", 60 * time.Second, true},
		{"60::organization", 60 * time.Second, true}, // no category: all of them
		{"60:transaction:key", 0, false},
		{"60:transaction:key, 2700:default;error;security:organization", 2700 * time.Second, true},
		{"1:error:key:quota_exceeded:custom, 5:error:project", 5 * time.Second, true},
		{"x:error:key, 3:error:key", 3 * time.Second, true},
		{"NaN:error:key", 0, false},
		{"-4:error:key", 0, false},
	} {
		got, ok := RateLimit(c.h, "error")
		if got != c.want || ok != c.ok {
			t.Errorf("RateLimit(%q) = %v %v, want %v %v", c.h, got, ok, c.want, c.ok)
		}
	}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		h    string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{"Thu, 26 Nov 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Thu, 26 Nov 2026 11:00:00 GMT", 0, true},
		{"soon", 0, false},
		{"Inf", 0, false},
		{"", 0, false},
	} {
		got, ok := RetryAfter(c.h, now)
		if got != c.want || ok != c.ok {
			t.Errorf("RetryAfter(%q) = %v %v, want %v %v", c.h, got, ok, c.want, c.ok)
		}
	}
}

func FuzzRateLimitHeaders(f *testing.F) {
	f.Add("60:error;transaction:key, 2700:default:organization:quota", "120")
	f.Add("::,:", "Thu, 26 Nov 2026 12:00:30 GMT")
	f.Fuzz(func(t *testing.T, limits, retry string) {
		if d, ok := RateLimit(limits, "error"); d < 0 || d > 30*24*time.Hour || !ok && d != 0 {
			t.Fatalf("RateLimit(%q) = %v %v", limits, d, ok)
		}
		if d, ok := RetryAfter(retry, time.Unix(1795700000, 0)); d < 0 || d > 30*24*time.Hour || !ok && d != 0 {
			t.Fatalf("RetryAfter(%q) = %v %v", retry, d, ok)
		}
	})
}

func FuzzParseDSN(f *testing.F) {
	f.Add("https://abc@o1.ingest.sentry.io/42")
	f.Add("http://k:s@host:9000/path/to/7/")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDSN(s)
		if err != nil {
			return
		}
		if d.PublicKey == "" || d.Host == "" || d.ProjectID == "" {
			t.Fatalf("%q parsed to %+v", s, d)
		}
		if _, err := ParseDSN(d.String()); err != nil {
			t.Fatalf("%q: reparse: %v", s, err)
		}
	})
}
