// Package sentry forwards unwound's crash reports to Sentry (SaaS or
// self-hosted) as native events: the signal as the exception, every
// thread's frames with their instruction addresses, and the modules as
// ELF debug images whose debug_id Sentry derives from the same GNU build
// ID, so that Sentry symbolicates them from files uploaded with
// `sentry-cli debug-files upload`. docs/sentry.md describes the event and
// the delivery.
//
// A Forwarder is what the collector calls once a report is stored: it
// only enqueues; a background goroutine keeps a durable outbox and
// delivers each event once, with backoff, honouring Sentry's rate limits.
package sentry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// DSN is a parsed Sentry DSN:
// {scheme}://{public_key}[:{secret_key}]@{host}[:{port}]/[{path}/]{project_id}.
type DSN struct {
	raw       string
	Scheme    string // http or https
	PublicKey string
	SecretKey string // deprecated by Sentry; kept when given
	Host      string // host[:port]
	Path      string // "" or "/path" before the project id
	ProjectID string
}

// ParseDSN parses a DSN, with an error that says what is wrong.
func ParseDSN(s string) (*DSN, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("sentry DSN: empty (give --dsn or set SENTRY_DSN)")
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, keys included
		}
		return nil, fmt.Errorf("sentry DSN %q: %w", redact(s), err)
	}
	bad := func(why string) error { return fmt.Errorf("sentry DSN %q: %s", redact(s), why) }
	switch u.Scheme {
	case "http", "https":
	case "":
		return nil, bad("no scheme: want https://KEY@HOST/PROJECT_ID")
	default:
		return nil, bad("scheme " + u.Scheme + ": want http or https")
	}
	if u.User == nil || u.User.Username() == "" {
		return nil, bad("no public key before the @")
	}
	if u.Host == "" {
		return nil, bad("no host")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, bad("a query or fragment is not part of a DSN")
	}
	p := strings.TrimSuffix(u.Path, "/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 || p[i+1:] == "" {
		return nil, bad("no project id after the host")
	}
	proj := p[i+1:]
	for _, c := range proj {
		if c < '0' || c > '9' {
			return nil, bad("project id " + proj + ": want digits")
		}
	}
	secret, _ := u.User.Password()
	return &DSN{
		raw:       s,
		Scheme:    u.Scheme,
		PublicKey: u.User.Username(),
		SecretKey: secret,
		Host:      u.Host,
		Path:      p[:i],
		ProjectID: proj,
	}, nil
}

// redact hides a DSN's keys in error messages and logs.
func redact(s string) string {
	at := strings.LastIndexByte(s, '@')
	sch := strings.Index(s, "://")
	if at < 0 || sch < 0 || at < sch {
		return s
	}
	return s[:sch+3] + "***" + s[at:]
}

// String is the DSN as given.
func (d *DSN) String() string { return d.raw }

// Redacted is the DSN without its keys, for logs.
func (d *DSN) Redacted() string { return redact(d.raw) }

// EnvelopeURL is where envelopes go: {scheme}://{host}{path}/api/{project_id}/envelope/.
func (d *DSN) EnvelopeURL() string {
	return d.Scheme + "://" + d.Host + d.Path + "/api/" + d.ProjectID + "/envelope/"
}

// AuthHeader is the X-Sentry-Auth header's value for client (e.g.
// "unwound/1.2.0").
func (d *DSN) AuthHeader(client string) string {
	h := "Sentry sentry_version=7, sentry_key=" + d.PublicKey + ", sentry_client=" + client
	if d.SecretKey != "" {
		h += ", sentry_secret=" + d.SecretKey
	}
	return h
}
