// Package httpup is the uploader's HTTP transport: each report is POSTed
// as it sits in the queue (Content-Type application/json,
// Content-Encoding zstd) with its id and the device id in headers and an
// optional bearer token, over TLS with an optional CA bundle and client
// certificate; the proxy comes from the environment.
//
// Responses: 2xx and 409 (already have it) delete the entry; 400, 413, 415
// and 422 quarantine it (the report itself is unacceptable); 408, 429 and
// 5xx are temporary (Retry-After honoured; 503: the collector is busy,
// 507: its disk is full, and the report waits in the queue); other codes (401, 403, 404:
// the board's configuration is wrong, not the report) are temporary too,
// so a bad token never quarantines the whole queue.
package httpup

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/uploader"
)

// Config of the transport.
type Config struct {
	URL        string
	Token      string // used when TokenFile is empty
	TokenFile  string // read at every request (rotation); wins over Token
	CAFile     string // PEM bundle; empty: the system roots
	ClientCert string // PEM, for mutual TLS
	ClientKey  string
	Timeout    time.Duration // one request (default 30s)
	UserAgent  string
}

// Transport POSTs reports.
type Transport struct {
	cfg    Config
	client *http.Client
}

// New checks cfg and builds the client.
func New(cfg Config) (*Transport, error) {
	if cfg.URL == "" {
		return nil, errors.New("upload.url is empty")
	}
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("upload.url %q: want http:// or https://", cfg.URL)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upload.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upload.ca_file %s: no PEM certificate", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if cfg.ClientCert != "" || cfg.ClientKey != "" {
		cert, err := tls.LoadX509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("upload.client_cert/client_key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          2,
		ForceAttemptHTTP2:     true,
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "unwound-uploader"
	}
	return &Transport{cfg: cfg, client: &http.Client{Transport: tr, Timeout: cfg.Timeout}}, nil
}

func (t *Transport) token() (string, error) {
	if t.cfg.TokenFile != "" {
		b, err := os.ReadFile(t.cfg.TokenFile)
		if err != nil {
			return "", fmt.Errorf("upload.token_file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return t.cfg.Token, nil
}

// Send implements uploader.Transport.
func (t *Transport) Send(ctx context.Context, it uploader.Item) (uploader.Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.cfg.URL, bytes.NewReader(it.Data))
	if err != nil {
		return uploader.Result{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "zstd")
	req.Header.Set("User-Agent", t.cfg.UserAgent)
	req.Header.Set("X-Unwound-Report-Id", it.ID)
	if it.DeviceID != "" {
		req.Header.Set("X-Unwound-Device-Id", it.DeviceID)
	}
	tok, err := t.token()
	if err != nil {
		return uploader.Result{}, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return uploader.Result{}, err // network down, timeout, TLS: temporary
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	msg := strings.TrimSpace(string(body))
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return uploader.Result{Outcome: uploader.Delivered}, nil
	case code == http.StatusConflict:
		return uploader.Result{Outcome: uploader.Duplicate}, nil
	case code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge ||
		code == http.StatusUnsupportedMediaType || code == http.StatusUnprocessableEntity:
		return uploader.Result{Outcome: uploader.Rejected, Reason: fmt.Sprintf("HTTP %d: %s", code, msg)}, nil
	}
	return uploader.Result{}, &uploader.RetryError{
		Err:   fmt.Errorf("HTTP %d: %s", code, msg),
		After: RetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// RetryAfter parses a Retry-After value (seconds or an HTTP date); 0 when
// absent or unparsable. It is capped at a day.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0
		}
		if n > 86400 {
			n = 86400
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	if d < 0 {
		return 0
	}
	if d > 24*time.Hour {
		d = 24 * time.Hour
	}
	return d
}

// Close drops idle connections.
func (t *Transport) Close() error {
	t.client.CloseIdleConnections()
	return nil
}
