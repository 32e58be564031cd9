package loadtest

import (
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// TestLoad: reports from many simulated devices over HTTP into a real
// unwound serve, without debug files and with them (the symbol store
// warm), every report acknowledged once and counted once. It prints the
// ingest rate, the server's peak RSS and the groups API's time to first
// byte. A small fleet by default; UNWOUND_BENCH_LOAD=1 sends 100,000
// reports from 10,000 devices (docs/collector-limits.md has the figures).
func TestLoad(t *testing.T) {
	n, devices, workers := 1000, 100, 8
	if benchLoad() {
		n, devices, workers = 100_000, 10_000, 16
	} else if testing.Short() {
		t.Skip("sends 2,000 reports; -short")
	}
	fl := buildFleet(t)
	genStart := time.Now()
	ups := fl.reports(n, devices, 1)
	t.Logf("%d reports from %d devices made in %v", n, devices, time.Since(genStart).Round(time.Millisecond))
	for _, run := range []struct {
		name    string
		symbols bool
	}{{"without debug files", false}, {"symbolized (warm)", true}} {
		dir := t.TempDir()
		var extra []string
		if run.symbols {
			extra = []string{"--debug-dir", fl.debugDir}
		}
		s := startServe(t, dir, nil, extra...)
		url := func() string { return s.url }
		send(t, url, fl.reports(1, 1, 99), 1, nil) // warm: the debug file is open
		base := status(pidOf(s), "VmRSS")
		res := send(t, url, ups, workers, nil)
		if len(res.acked) != n || res.refused.Load() != 0 {
			t.Fatalf("%s: %d of %d acknowledged, %d refused", run.name, len(res.acked), n, res.refused.Load())
		}
		hwm := status(pidOf(s), "VmHWM")
		cold, coldCode := ttfb(t, s.url+"/api/groups")
		warm, _ := ttfb(t, s.url+"/api/groups")
		page, pageCode := ttfb(t, s.url+"/")
		t.Logf("%-20s %6d reports in %7v: %6.0f reports/s (%d workers, %d retries); RSS %d MiB before, peak %d MiB; "+
			"GET /api/groups first byte %v (HTTP %d), again %v; GET / %v (HTTP %d)",
			run.name, n, res.elapsed.Round(time.Millisecond), float64(n)/res.elapsed.Seconds(), workers, res.retries.Load(),
			base>>10, hwm>>10, cold.Round(time.Microsecond), coldCode, warm.Round(time.Microsecond), page.Round(time.Microsecond), pageCode)
		c := counts(t, dir)
		if c.reports != n+1 || c.grouped != c.reports || c.devices != c.reports {
			t.Errorf("%s: %+v, want %d reports each counted once", run.name, c, n+1)
		}
		if run.symbols && c.symbolized == 0 || !run.symbols && c.symbolized != 0 {
			t.Errorf("%s: %d symbolized groups of %d", run.name, c.symbolized, c.groups)
		}
		t.Logf("%-20s %d groups (%d symbolized)", run.name, c.groups, c.symbolized)
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// ttfb is the time from sending a GET to its response's first byte.
func ttfb(t testing.TB, url string) (time.Duration, int) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	var start, first time.Time
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest:         func(httptrace.WroteRequestInfo) { start = time.Now() },
		GotFirstResponseByte: func() { first = time.Now() },
	}))
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return first.Sub(start), resp.StatusCode
}

// dbCounts are what the collector's database holds.
type dbCounts struct {
	reports, grouped, devices, groups, symbolized int
	dupIDs                                        int
}

// counts reads the database in dir: reports kept, reports counted in
// groups and in device facets (each report once in each), groups.
func counts(t testing.TB, dir string) dbCounts {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "unwound.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var c dbCounts
	for q, dst := range map[string]*int{
		`SELECT count(*) FROM reports`:                                                  &c.reports,
		`SELECT coalesce(sum(count), 0) FROM groups`:                                    &c.grouped,
		`SELECT coalesce(sum(count), 0) FROM facets WHERE facet='device'`:               &c.devices,
		`SELECT count(*) FROM groups`:                                                   &c.groups,
		`SELECT count(*) FROM groups WHERE symbolized = 1`:                              &c.symbolized,
		`SELECT count(*) FROM (SELECT id FROM reports GROUP BY id HAVING count(*) > 1)`: &c.dupIDs,
	} {
		if err := db.QueryRow(q).Scan(dst); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return c
}

// has reports whether the database in dir keeps the report id.
func hasIDs(t testing.TB, dir string, ids map[string]int) (missing []string) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "unwound.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id := range ids {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM reports WHERE id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			missing = append(missing, fmt.Sprintf("%s (%d)", id, n))
		}
	}
	return missing
}

// TestKillDuringIngest: the collector is killed with SIGKILL every few
// seconds while devices upload and retry; afterwards every report that
// was acknowledged (2xx) is in the database exactly once, and counted
// once in its group. UNWOUND_BENCH_LOAD=1 runs it longer.
func TestKillDuringIngest(t *testing.T) {
	n, devices, every := 1500, 150, 400*time.Millisecond
	if benchLoad() {
		n, devices, every = 30_000, 3_000, 3*time.Second
	} else if testing.Short() {
		t.Skip("kills a collector during ingest; -short")
	}
	fl := buildFleet(t)
	ups := fl.reports(n, devices, 2)
	dir := t.TempDir()
	s := startServe(t, dir, nil, "--debug-dir", fl.debugDir)
	addr := s.url[len("http://"):]
	var cur = make(chan *server, 1)
	cur <- s
	url := func() string { return "http://" + addr }
	done := make(chan struct{})
	kills := 0
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for {
			select {
			case <-done:
				return
			case <-time.After(every):
			}
			s := <-cur
			s.cmd.Process.Signal(syscall.SIGKILL)
			s.cmd.Wait()
			kills++
			// The same port: the uploaders keep their URL.
			for i := 0; ; i++ {
				if ln, err := net.Listen("tcp", addr); err == nil {
					ln.Close()
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			cur <- startServe(t, dir, nil, "--debug-dir", fl.debugDir, "--listen", addr)
		}
	}()
	res := send(t, url, ups, 8, nil)
	close(done)
	<-killerDone
	last := <-cur
	last.cmd.Process.Signal(syscall.SIGKILL)
	last.cmd.Wait()
	if len(res.acked) != n {
		t.Fatalf("%d of %d reports acknowledged", len(res.acked), n)
	}
	missing := hasIDs(t, dir, res.acked)
	c := counts(t, dir)
	t.Logf("%d reports, %d kill -9 in %v (one every %v): %d acknowledged, %d of them as duplicates (stored before a kill, acknowledgement lost), %d retries; database: %d reports, %d counted in groups, %d in device facets; %d acknowledged but missing or doubled",
		n, kills, res.elapsed.Round(time.Millisecond), every, len(res.acked), res.dup.Load(), res.retries.Load(), c.reports, c.grouped, c.devices, len(missing))
	if len(missing) > 0 {
		t.Errorf("acknowledged but not kept exactly once: %v", missing[:min(len(missing), 10)])
	}
	if c.reports != n || c.grouped != n || c.devices != n || c.dupIDs != 0 {
		t.Errorf("database %+v, want %d reports each counted once", c, n)
	}
	if kills == 0 {
		t.Error("no kill happened: the run was too short")
	}
}
