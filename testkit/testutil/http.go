package testutil

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// Request sends a request to one of our servers with a bearer token
// (none if "") through client (nil: http.DefaultClient) and returns the
// answer, its body read and closed. The test fails if no answer comes.
func Request(t testing.TB, client *http.Client, method, url, token string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp, b
}
