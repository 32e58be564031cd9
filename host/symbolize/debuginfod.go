package symbolize

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Debuginfod fetches separate debug files by GNU build ID from debuginfod
// servers, the way gdb and elfutils' client do: GET URL/buildid/HEX/debuginfo
// on each server in turn, the file kept in a cache directory as
// CACHE/HEX/debuginfo (elfutils' layout, so the two can share one cache).
// A fetched file is verified like any other before it is used; one that is
// not the build it was asked for is deleted from the cache.
type Debuginfod struct {
	// URLs are the servers, tried in order (DEBUGINFOD_URLS, split on
	// spaces).
	URLs []string
	// Cache is the cache directory (DEBUGINFOD_CACHE_PATH, default
	// $XDG_CACHE_HOME/debuginfod_client).
	Cache string
	// Client does the requests; nil means a client that gives up when a
	// server sends no response headers within 90 s (elfutils'
	// DEBUGINFOD_TIMEOUT default).
	Client *http.Client
	// Header is sent with every request (DEBUGINFOD_HEADERS_FILE: an
	// Authorization: Bearer line for a server behind a token).
	Header http.Header

	mu   sync.Mutex
	dead map[string]error // servers that could not be reached: not asked again
}

// maxDebuginfo bounds one downloaded debug file.
const maxDebuginfo = 4 << 30

// DebuginfodFromEnv returns the client DEBUGINFOD_URLS asks for, nil when
// it is unset or empty. DEBUGINFOD_CACHE_PATH and DEBUGINFOD_TIMEOUT
// (seconds) are honoured as elfutils does.
func DebuginfodFromEnv() *Debuginfod {
	urls := strings.Fields(os.Getenv("DEBUGINFOD_URLS"))
	if len(urls) == 0 {
		return nil
	}
	d := &Debuginfod{URLs: urls, Cache: os.Getenv("DEBUGINFOD_CACHE_PATH")}
	if d.Cache == "" {
		if c, err := os.UserCacheDir(); err == nil {
			d.Cache = filepath.Join(c, "debuginfod_client")
		} else {
			d.Cache = filepath.Join(os.TempDir(), "debuginfod_client")
		}
	}
	timeout := 90 * time.Second
	if s := os.Getenv("DEBUGINFOD_TIMEOUT"); s != "" {
		var n int
		if _, err := fmt.Sscan(s, &n); err == nil && n > 0 {
			timeout = time.Duration(n) * time.Second
		}
	}
	d.Client = httpClient(timeout)
	if f := os.Getenv("DEBUGINFOD_HEADERS_FILE"); f != "" {
		d.Header = readHeaders(f)
	}
	return d
}

// readHeaders reads a DEBUGINFOD_HEADERS_FILE as elfutils' client does:
// one "Name: value" a line; other lines are ignored. The file is bounded.
func readHeaders(path string) http.Header {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil
	}
	h := http.Header{}
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			continue
		}
		h.Add(name, value)
	}
	return h
}

// httpClient gives up on a server that sends no response headers within
// timeout; a large body may take longer.
func httpClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		ResponseHeaderTimeout: timeout,
		TLSHandshakeTimeout:   timeout,
	}}
}

// fetch returns the path of the debug file for a GNU build ID (lower-case
// hex), from the cache or the first server that has it, and the URL it came
// from ("" from the cache).
func (d *Debuginfod) fetch(id string) (path, from string, err error) {
	if _, err := hex.DecodeString(id); err != nil || len(id) < 2 {
		return "", "", fmt.Errorf("debuginfod: build id %q is not hex", id)
	}
	dir := filepath.Join(d.Cache, id)
	path = filepath.Join(dir, "debuginfo")
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
		return path, "", nil
	}
	client := d.Client
	if client == nil {
		client = httpClient(90 * time.Second)
	}
	var errs []string
	for _, base := range d.URLs {
		d.mu.Lock()
		dead := d.dead[base]
		d.mu.Unlock()
		if dead != nil {
			continue // said once, for the first module that asked
		}
		u, err := url.JoinPath(base, "buildid", id, "debuginfo")
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", base, err))
			continue
		}
		got, reached, err := d.download(client, u, dir, path)
		if err != nil {
			errs = append(errs, err.Error())
			if !reached {
				// A server that does not answer would cost its
				// timeout again for every module.
				d.mu.Lock()
				if d.dead == nil {
					d.dead = map[string]error{}
				}
				d.dead[base] = err
				d.mu.Unlock()
			}
			continue
		}
		if got {
			return path, u, nil
		}
	}
	if len(errs) > 0 {
		return "", "", errors.New("debuginfod: " + strings.Join(errs, "; "))
	}
	return "", "", nil
}

// download stores u's body at path; false without error when the server
// does not have the file (404). reached says whether the server answered.
func (d *Debuginfod) download(client *http.Client, u, dir, path string) (got, reached bool, err error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return false, false, err
	}
	for k, v := range d.Header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, true, nil
	case resp.StatusCode != http.StatusOK:
		return false, true, fmt.Errorf("%s: %s", u, resp.Status)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, true, err
	}
	tmp, err := os.CreateTemp(dir, ".debuginfo-*")
	if err != nil {
		return false, true, err
	}
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, maxDebuginfo+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > maxDebuginfo {
		err = fmt.Errorf("more than %d bytes", int64(maxDebuginfo))
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return false, true, fmt.Errorf("%s: %w", u, err)
	}
	return true, true, nil
}
