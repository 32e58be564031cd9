package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/collectortest"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/offline"
	"github.com/unwound-dev/unwound/testkit/testbin"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// crashReport is the report of one x86_64 fixture crash (host kernel
// cores), and the fixture binary.
func crashReport(t *testing.T, variant, prog, scenario string) (*report.Report, fixture.Binary) {
	t.Helper()
	if !fixture.Native("x86_64") || !fixture.HostCoresUsable() {
		t.Skip("needs x86_64 kernel cores written into the cwd")
	}
	b := fixture.Binary{Arch: "x86_64", Variant: variant, Prog: prog, Dir: fixture.Build(t, "x86_64")}
	core, _ := fixture.Core(t, b, scenario)
	return offline.Report(t, core, "/", ""), b
}

// withRelease is a report as a board of release version would send it,
// as device dev.
func withRelease(t *testing.T, r *report.Report, id int, dev, version string) []byte {
	t.Helper()
	cp := *r
	cp.ID, cp.DeviceID = fmt.Sprintf("%08x%024x", 0x9e3779b1*uint32(id), id), dev
	js, _ := json.Marshal(&cp)
	var m map[string]any
	json.Unmarshal(js, &m)
	m["release"] = map[string]string{"ID": "debian", "VERSION_ID": "12", "IMAGE_ID": "gateway", "IMAGE_VERSION": version}
	js, _ = json.Marshal(m)
	return report.Compress(js)
}

// run runs a program (one of ours, or a tool such as objcopy) and returns
// what it printed; the test fails if it fails.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	return string(testutil.Run(t, bin, args...))
}

// TestCrashesCommand, end to end with the built binary: reports posted to
// a running collector before their symbols exist group by module+offset;
// the symbols arrive in DIR/symbols and the collector, seeing the
// generation file change, regroups them by function. unwound crashes
// lists, shows and lists reports over HTTP and on the directory, and
// show prints the trace as unwound symbolize does.
func TestCrashesCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("fixtures: not in -short")
	}
	nullwrite, b := crashReport(t, "O2-dynamic", "crash", "nullwrite")
	abort, _ := crashReport(t, "O2-dynamic", "crash", "abort")
	bin := testbin.Build(t, "unwound", "")
	dir := t.TempDir()
	srv := testbin.Collector(t, "--dir", dir, "--token", "s3cret", "--debug-dir", "/usr/lib/debug")
	c := &collector.Client{URL: srv.URL, Token: "s3cret"}
	n := 0
	post := func(r *report.Report, dev, version string) {
		n++
		if _, stored, inv, err := c.Put(withRelease(t, r, n, dev, version), ""); err != nil || inv != nil || !stored {
			t.Fatalf("post: %v %v\n%s", err, inv, srv.Log())
		}
	}
	for d := 0; d < 3; d++ {
		post(nullwrite, fmt.Sprintf("gw-%d", d), "2.4.0")
	}
	post(nullwrite, "gw-9", "2.4.1")
	post(abort, "gw-1", "2.4.1")

	// A wrong token is refused; the same request with it is answered.
	if out, err := exec.Command(bin, "crashes", "list", "--url", srv.URL, "--token", "nope").CombinedOutput(); err == nil || !strings.Contains(string(out), "401") {
		t.Fatalf("wrong token: %v\n%s", err, out)
	}
	list := run(t, bin, "crashes", "list", "--url", srv.URL, "--token", "s3cret")
	t.Logf("before symbols:\n%s", list)
	if !strings.Contains(list, "crash+0x") || strings.Contains(list, "null_write") {
		t.Fatalf("before symbols, groups by module+offset:\n%s", list)
	}

	// The symbol store's layout, then its generation file.
	var buildID string
	for _, m := range nullwrite.Modules {
		if filepath.Base(m.Path) == "crash" {
			buildID = m.BuildID
		}
	}
	dst := filepath.Join(dir, "symbols", ".build-id", buildID[:2], buildID[2:]+".debug")
	os.MkdirAll(filepath.Dir(dst), 0o755)
	data, _ := os.ReadFile(b.Unstripped())
	os.WriteFile(dst, data, 0o644)
	os.WriteFile(filepath.Join(dir, "symbols", "generation"), []byte("1\n"), 0o644)
	deadline := time.Now().Add(30 * time.Second)
	os.Setenv("UNWOUND_TOKEN", "s3cret")
	defer os.Unsetenv("UNWOUND_TOKEN")
	for {
		list = run(t, bin, "crashes", "list", "--url", srv.URL)
		if strings.Contains(list, "null_write") && !strings.Contains(list, "crash+0x") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no regrouping after the symbols arrived:\n%s\n%s", list, srv.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("after symbols:\n%s", list)
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "null_write") || !strings.Contains(lines[2], "ab2") {
		t.Fatalf("want null_write (most boards) then ab2:\n%s", list)
	}
	if f := strings.Fields(lines[1]); f[1] != "4" || f[2] != "4" {
		t.Fatalf("null_write: boards %s count %s, want 4 4", f[1], f[2])
	}
	if !strings.Contains(lines[2], "2.4.1 (new)") {
		t.Fatalf("ab2 is new in 2.4.1:\n%s", list)
	}

	// The same through the directory, as JSON, with filters.
	var gs []collector.Group
	if err := json.Unmarshal([]byte(run(t, bin, "crashes", "list", "--dir", dir, "--json", "--release", "gateway 2.4.0")), &gs); err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Signature != "null_write" || gs[0].Count != 4 || len(gs[0].Releases) != 2 {
		t.Fatalf("--release: %+v", gs)
	}
	for _, args := range [][]string{{"--signal", "SIGABRT"}, {"--device", "gw-1"}, {"--program", "crash"}, {"--since", "1h"}} {
		out := run(t, bin, append([]string{"crashes", "list", "--dir", dir}, args...)...)
		want := map[string]int{"--signal": 1, "--device": 2, "--program": 2, "--since": 2}[args[0]]
		if got := strings.Count(out, "\n") - 1; got != want {
			t.Errorf("list %v: %d groups, want %d:\n%s", args, got, want, out)
		}
	}

	// show GROUP: the numbers, and the sample's trace exactly as
	// unwound symbolize prints it with the same debug files.
	group := gs[0].ID
	show := run(t, bin, "crashes", "show", group, "--url", srv.URL)
	if !strings.Contains(show, "4 reports from 4 boards") || !strings.Contains(show, "release gateway 2.4.0") {
		t.Fatalf("show:\n%s", show)
	}
	sample := gs[0].Sample
	raw := filepath.Join(t.TempDir(), sample+".json.zst")
	resp := get(t, srv.URL+"/api/reports/"+sample+"/raw", "s3cret")
	os.WriteFile(raw, resp, 0o644)
	sym := run(t, bin, "symbolize", "--debug-dir", filepath.Join(dir, "symbols"), "--debug-dir", "/usr/lib/debug", "--sysroot", filepath.Join(dir, "sysroot"), raw)
	if i := strings.Index(show, "report "+sample+":"); i < 0 || show[i:] != sym {
		t.Fatalf("show's trace differs from unwound symbolize's:\n%s\n---\n%s", show, sym)
	}
	if !strings.Contains(sym, "in null_write at crash.c:") {
		t.Fatalf("no symbols in the trace:\n%s", sym)
	}
	// show REPORT (a prefix) names its group.
	if out := run(t, bin, "crashes", "show", "--dir", dir, sample[:12]); !strings.Contains(out, "group "+group) {
		t.Fatalf("show report:\n%s", out)
	}
	reps := run(t, bin, "crashes", "reports", group, "--dir", dir)
	if strings.Count(reps, "\n") != 5 || !strings.Contains(reps, "gw-9") {
		t.Fatalf("reports:\n%s", reps)
	}
	// Nothing more to do: resymbolize changes nothing.
	if out := run(t, bin, "crashes", "resymbolize", "--url", srv.URL); !strings.Contains(out, "0 in another group") {
		t.Fatalf("resymbolize:\n%s", out)
	}
	// GET /reports lists from the database.
	var listed []struct{ ID string }
	json.Unmarshal(get(t, srv.URL+"/reports", "s3cret"), &listed)
	if len(listed) != 5 {
		t.Fatalf("GET /reports: %d", len(listed))
	}
}

// get is the body of a GET of url with a bearer token (none if ""); the
// test fails unless the answer is 200.
func get(t *testing.T, url, token string) []byte {
	t.Helper()
	resp, b := testutil.Request(t, nil, "GET", url, token, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	return b
}

// TestCollectorKill: unwound serve killed with SIGKILL again and again
// while four clients post; every report acknowledged (201 or 200) is in
// the database afterwards, once, and every group's count equals its
// reports.
func TestCollectorKill(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(26))
	type rep struct {
		id   string
		data []byte
	}
	var all []rep
	n := 1500
	if testing.Short() {
		n = 300
	}
	for i := 0; i < n; i++ {
		id, data := testutil.Report(rng, fmt.Sprintf("prog%d", i%5), 20)
		all = append(all, rep{id, data})
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	next := 0
	kills := 0
	for round := 0; next < len(all) && round < 40; round++ {
		srv := testbin.Collector(t, "--dir", dir)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					mu.Lock()
					if next >= len(all) {
						mu.Unlock()
						return
					}
					r := all[next]
					next++
					mu.Unlock()
					req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/", bytes.NewReader(r.data))
					req.Header.Set("Content-Encoding", "zstd")
					resp, err := http.DefaultClient.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					mu.Lock()
					if err == nil && (resp.StatusCode == 201 || resp.StatusCode == 200) {
						acked[r.id] = true
					} else {
						// Not acknowledged: the uploader keeps it and
						// offers it again.
						all = append(all, r)
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.Intn(200)) * time.Millisecond)
		srv.Kill()
		kills++
		cancel()
		wg.Wait()
	}
	c, list := collectortest.List(t, dir)
	have := map[string]int{}
	for _, s := range list {
		have[s.ID]++
	}
	lost := 0
	for id := range acked {
		if have[id] != 1 {
			lost++
		}
	}
	gs, _ := c.Groups(collector.Filter{})
	sum := 0
	for _, g := range gs {
		sum += g.Count
		if g.Count != g.Kept {
			t.Errorf("group %s: count %d, %d reports", g.ID, g.Count, g.Kept)
		}
	}
	t.Logf("%d kills, %d reports acknowledged, %d in the database, %d lost", kills, len(acked), len(list), lost)
	if lost > 0 || sum != len(list) || len(acked) < 50 {
		t.Fatalf("%d acknowledged reports lost; groups count %d of %d reports", lost, sum, len(list))
	}
}
