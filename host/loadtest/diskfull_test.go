package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/uploader/httpup"
)

// TestDiskFull: a collector whose disk is full answers 507, and the
// uploader keeps the report (no quarantine) and delivers it once there
// is room again.
//
// The disk is real and really full: the collector runs in a user and
// mount namespace of its own (unshare -Urm, no privilege needed where
// unprivileged user namespaces are allowed) with a 1 MiB tmpfs over its
// --dir. The mount exists only in that namespace and goes with the
// process: the host's mounts are never touched. The test fills and
// empties the tmpfs from outside through /proc/PID/root.
func TestDiskFull(t *testing.T) {
	if err := exec.Command("unshare", "-Urm", "true").Run(); err != nil {
		t.Skipf("no unprivileged user and mount namespaces here (unshare -Urm: %v)", err)
	}
	dir := t.TempDir()
	wrap := []string{"unshare", "-Urm", "sh", "-c", `mount -t tmpfs -o size=1m unwound-full "$0" && exec "$@"`, dir}
	s := startServe(t, dir, wrap)
	inside := filepath.Join("/proc", strconv.Itoa(pidOf(s)), "root", dir)

	rng := rand.New(rand.NewSource(3))
	_, first := testutil.Report(rng, "first", 20)
	s.alive(t, first)

	ballast := filepath.Join(inside, "ballast")
	f, err := os.Create(ballast)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(make([]byte, 2<<20))
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the collector's disk: %v", err)
	}

	q := testutil.Queue(t)
	want := testutil.Fill(t, q, rng, 1, 20)
	tr, err := httpup.New(httpup.Config{URL: s.url + "/v1/reports", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	u := &uploader.Uploader{Queue: q, Transport: tr, DeviceID: "dev-full", Log: t.Logf}
	from := len(s.log.String())
	st, err := u.Drain(context.Background())
	if err == nil || st.Delivered != 0 || st.Quarantined != 0 {
		t.Fatalf("disk full: %+v, %v", st, err)
	}
	t.Logf("uploader: %v", err)
	t.Logf("collector: %s", s.waitLog(t, from, `.*507.*`))
	if n := len(testutil.Entries(t, q.Dir())); n != 1 {
		t.Fatalf("%d entries left in the queue, want the report kept", n)
	}
	if qd, _ := os.ReadDir(filepath.Join(q.Dir(), uploader.QuarantineDir)); len(qd) != 0 {
		t.Fatal("the report was quarantined")
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	st, err = u.Drain(context.Background())
	if err != nil || st.Delivered != 1 {
		t.Fatalf("room again: %+v, %v", st, err)
	}
	for id := range want {
		if !s.has(t, id) {
			t.Fatalf("report %s acknowledged but not in the collector", id)
		}
	}
}

// has reports whether the collector lists the report id (GET /reports).
func (s *server) has(t testing.TB, id string) bool {
	req, _ := http.NewRequest("GET", s.url+"/reports", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.ID == id {
			return true
		}
	}
	return false
}
