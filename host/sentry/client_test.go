package sentry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// What each answer of Sentry's makes the client do.
func TestClientOutcomes(t *testing.T) {
	var status int
	var hdr map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		w.Write([]byte(`{"detail":"why"}`))
	}))
	defer srv.Close()
	dsn, err := ParseDSN("http://k@" + srv.Listener.Addr().String() + "/1")
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{DSN: dsn}
	for _, tc := range []struct {
		status int
		hdr    map[string]string
		want   Outcome
		after  time.Duration
	}{
		{200, nil, Sent, 0},
		{200, map[string]string{"X-Sentry-Rate-Limits": "30:error:key"}, Sent, 30 * time.Second},
		{200, map[string]string{"X-Sentry-Rate-Limits": "30:transaction:key"}, Sent, 0},
		{429, map[string]string{"Retry-After": "7"}, Wait, 7 * time.Second},
		{429, map[string]string{"Retry-After": "7", "X-Sentry-Rate-Limits": "12::organization"}, Wait, 12 * time.Second},
		{429, nil, Wait, 60 * time.Second},
		{500, nil, Retry, 0},
		{503, map[string]string{"Retry-After": "3"}, Retry, 3 * time.Second},
		{400, nil, Drop, 0},
		{401, nil, Drop, 0},
		{413, nil, Drop, 0},
	} {
		status, hdr = tc.status, tc.hdr
		res := c.Send(context.Background(), "0123456789abcdef0123456789abcdef", []byte(`{}`))
		if res.Outcome != tc.want || res.After != tc.after || res.Status != tc.status {
			t.Errorf("%d %v: %v after %v (status %d), want %v after %v", tc.status, tc.hdr, res.Outcome, res.After, res.Status, tc.want, tc.after)
		}
		if tc.want != Sent && (res.Err == nil || res.Err.Error() != "sentry: HTTP "+strconv.Itoa(tc.status)+`: {"detail":"why"}`) {
			t.Errorf("%d: error %v", tc.status, res.Err)
		}
	}
	// A refused connection is a network error: retry.
	srv.Close()
	if res := c.Send(context.Background(), "0123456789abcdef0123456789abcdef", []byte(`{}`)); res.Outcome != Retry || res.Err == nil {
		t.Errorf("closed server: %+v", res)
	}
}
