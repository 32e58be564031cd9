package webtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

var update = flag.Bool("update", false, "write the screenshots into docs/img for the README")

// chromium is the browser: Debian's package (scripts/deps.sh), or
// UNWOUND_CHROMIUM.
func chromium(t *testing.T) string {
	p := os.Getenv("UNWOUND_CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(p); err != nil {
		t.Skipf("no browser: %v (scripts/deps.sh installs chromium)", err)
	}
	return p
}

// buildUnwound builds the real host tool.
func buildUnwound(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "unwound")
	testutil.Run(t, "go", "build", "-o", bin, "github.com/unwound-dev/unwound/cmd/unwound")
	return bin
}

var listening = regexp.MustCompile(`listening on (https?://\S+),`)

// serve starts unwound serve on dir and returns its base URL; the
// process ends with the test.
func serve(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--dir", dir, "--listen", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			go io.Copy(io.Discard, stderr)
			return strings.Replace(m[1], "[::]", "127.0.0.1", 1)
		}
		t.Log(sc.Text())
	}
	t.Fatal("unwound serve ended before it listened")
	return ""
}

// post sends a report as unwound-uploader does.
func post(t *testing.T, base, token string, body []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/reports", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "zstd")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST: %s: %s", resp.Status, msg)
	}
}

// ttfb is the median time to the first byte of GET url over n requests,
// and the page's size.
func ttfb(t *testing.T, url, token string, n int) (time.Duration, int) {
	t.Helper()
	var ds []time.Duration
	size := 0
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/html")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", url, resp.Status)
		}
		size = len(b)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], size
}

// TestPageInBrowser is what a person does: real reports arrive over HTTP
// at the real unwound serve, then a browser with JavaScript off logs in,
// reads the groups table, sorts and filters it, follows the top crash to
// its trace, and opens a report. The screenshots go to docs/img with
// -update.
func TestPageInBrowser(t *testing.T) {
	browser := chromium(t)
	if testing.Short() {
		t.Skip("builds unwound, makes real reports, runs a browser")
	}
	now := time.Now().UTC()
	reports, symbols := labFleet(t, now)
	dir := t.TempDir()
	addSymbols(t, dir, symbols)
	const token = "lab-ingest-token-5b1f"
	const readToken = "lab-read-token-93ac"
	base := serve(t, buildUnwound(t), dir, "--token", token, "--read-token", readToken)
	for _, r := range reports {
		post(t, base, token, r)
	}
	top := topGroup(t, base, readToken)
	for _, page := range []string{"/", "/?order=count&release=gateway+2.4.1", "/group/" + top} {
		d, size := ttfb(t, base+page, readToken, 21)
		t.Logf("GET %s: time to first byte %v (median of 21), %d bytes, %d reports", page, d.Round(10*time.Microsecond), size, len(reports))
	}

	// The browser: headless, no sandbox (it runs as root here), nothing
	// fetched from the network, a fresh profile. Chromium's helper
	// processes may still write to the profile for a moment after the
	// browser is gone, so it is removed with retries, not by t.TempDir.
	profile, err := os.MkdirTemp("", "unwound-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for end := time.Now().Add(10 * time.Second); os.RemoveAll(profile) != nil && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
		}
	})
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	// Newer Chromium sends protocol values this chromedp does not know
	// (IPAddressSpace "Loopback"); those events are not the test's.
	quiet := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") {
			t.Log(msg)
		}
	}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf), chromedp.WithErrorf(quiet))
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	shots := t.TempDir()
	if *update {
		shots = filepath.Join(fixture.Root(), "docs", "img")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			p := filepath.Join(shots, name)
			t.Logf("screenshot %s (%d bytes)", p, len(png))
			return os.WriteFile(p, png, 0o644)
		})
	}

	// JavaScript off for the whole walk: the page must not need it.
	var loginTitle, location string
	run(t, ctx, "open the page",
		emulation.SetScriptExecutionDisabled(true),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.Title(&loginTitle),
		chromedp.Location(&location),
	)
	if !strings.HasPrefix(loginTitle, "Log in") || !strings.Contains(location, "/login?next=") {
		t.Fatalf("without a session the page is %q at %s, want the login form", loginTitle, location)
	}
	if strings.Contains(location, token) || strings.Contains(location, readToken) {
		t.Fatalf("a token in the URL: %s", location)
	}

	// A wrong token, then the read token.
	var msg string
	run(t, ctx, "log in with a wrong token",
		chromedp.SendKeys(`#token`, "not-the-token", chromedp.ByQuery),
		clickNav(`form button[type=submit]`),
		chromedp.WaitVisible(`p.error`, chromedp.ByQuery),
		chromedp.Text(`p.error`, &msg, chromedp.ByQuery),
	)
	if !strings.Contains(msg, "not the collector's token") {
		t.Fatalf("wrong token: %q", msg)
	}
	var table string
	run(t, ctx, "log in",
		chromedp.SendKeys(`#token`, readToken, chromedp.ByQuery),
		clickNav(`form[action="/login"] button[type=submit]`),
		chromedp.WaitVisible(`table.groups`, chromedp.ByQuery),
		chromedp.Location(&location),
		chromedp.Text(`table.groups`, &table, chromedp.ByQuery),
	)
	if location != base+"/" {
		t.Errorf("after login at %s, want %s/", location, base)
	}
	t.Logf("groups table:\n%s", table)
	// Seven bugs, two of them new in 2.4.1 (host/signature's rules name
	// them by the program's frames, past libc's).
	for _, want := range []string{"null_write", "recurse", "ab2", "rs2", "thrower", "SIGSEGV", "SIGBUS", "SIGABRT", "new in gateway 2.4.1", "gateway 2.4.0, gateway 2.4.1", "Boards", "Last seen"} {
		if !strings.Contains(table, want) {
			t.Errorf("the groups table lacks %q", want)
		}
	}
	var cookies []string
	run(t, ctx, "screenshot the table", shot("collector-groups.png"),
		chromedp.ActionFunc(func(ctx context.Context) error {
			var err error
			cookies, err = documentCookies(ctx)
			return err
		}))
	if len(cookies) != 0 {
		t.Errorf("the session cookie is readable by scripts: %v", cookies)
	}

	// Sort by reports, then filter by the newest release and a program.
	var rows int
	run(t, ctx, "sort by reports",
		clickNav(`th a[href*="order=count"]`),
		chromedp.WaitVisible(`span[aria-sort]`, chromedp.ByQuery),
		chromedp.Location(&location),
		chromedp.Text(`span[aria-sort]`, &msg, chromedp.ByQuery),
	)
	if !strings.HasSuffix(location, "/?order=count") || !strings.HasPrefix(msg, "Reports") {
		t.Errorf("sorted by reports: at %s, sorted column %q", location, msg)
	}
	counts := columnInts(t, ctx, 5)
	if !sort.SliceIsSorted(counts, func(i, j int) bool { return counts[i] > counts[j] }) {
		t.Errorf("reports column not sorted, most first: %v", counts)
	}
	run(t, ctx, "filter by release and program",
		chromedp.SetValue(`#release`, "gateway 2.4.1", chromedp.ByQuery),
		chromedp.SendKeys(`#program`, "crashxx", chromedp.ByQuery),
		clickNav(`form.filter button[type=submit]`),
		chromedp.WaitVisible(`p.summary`, chromedp.ByQuery),
		chromedp.Location(&location),
		chromedp.Evaluate(`document.querySelectorAll("table.groups tbody tr").length`, &rows),
		chromedp.Text(`table.groups`, &table, chromedp.ByQuery),
	)
	if !strings.Contains(location, "release=gateway+2.4.1") || !strings.Contains(location, "program=crashxx") || !strings.Contains(location, "order=count") {
		t.Errorf("filtered at %s", location)
	}
	if rows < 1 {
		t.Errorf("release 2.4.1, program crashxx: no rows")
	}
	for _, col := range []struct {
		n    int
		want string
	}{{3, "crashxx"}, {8, "gateway 2.4.1"}} {
		for i, c := range column(t, ctx, col.n) {
			if !strings.Contains(c, col.want) {
				t.Errorf("filtered to release 2.4.1 and program crashxx, row %d has %q", i+1, c)
			}
		}
	}

	// The top crash by boards: its trace, chart and counts.
	var trace, facts, counted string
	var bars int
	run(t, ctx, "open the top group",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`table.groups`, chromedp.ByQuery),
		clickNav(`table.groups tbody tr:first-child td.sig a`),
		chromedp.WaitVisible(`table.trace`, chromedp.ByQuery),
		chromedp.Text(`table.trace`, &trace, chromedp.ByQuery),
		chromedp.Text(`p.facts`, &facts, chromedp.ByQuery),
		chromedp.Text(`section.counts`, &counted, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("svg.chart rect.bar").length`, &bars),
		chromedp.Location(&location),
	)
	t.Logf("group page %s:\n%s\n%s", location, facts, trace)
	for _, want := range []string{"Function", "Trust", "Method", "crash.c:", "high", "main"} {
		if !strings.Contains(trace, want) {
			t.Errorf("the trace lacks %q", want)
		}
	}
	if !regexp.MustCompile(`\d+ reports from \d+ boards`).MatchString(facts) {
		t.Errorf("group facts: %q", facts)
	}
	for _, want := range []string{"By release", "gateway 2.4.0", "By hw_rev", "revA", "By kernel", "By architecture", "x86_64", "aarch64"} {
		if !strings.Contains(counted, want) {
			t.Errorf("the counts lack %q:\n%s", want, counted)
		}
	}
	if bars < 5 {
		t.Errorf("the chart has %d bars, want one a day", bars)
	}
	run(t, ctx, "screenshot the group", shot("collector-group.png"))

	// One report: every thread, the modules.
	var threads int
	var rep string
	run(t, ctx, "open a report",
		clickNav(`table.reports tbody tr:first-child a`),
		chromedp.WaitVisible(`section.thread`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("section.thread").length`, &threads),
		chromedp.Text(`main`, &rep, chromedp.ByQuery),
	)
	for _, want := range []string{"Signal", "SIGSEGV", "Device", "hw_rev", "Release", "gateway 2.", "crashed", "Modules", "libc.so.6"} {
		if !strings.Contains(rep, want) {
			t.Errorf("the report page lacks %q", want)
		}
	}
	if threads < 1 {
		t.Errorf("%d threads on the report page", threads)
	}

	// Logging out ends the session.
	run(t, ctx, "log out",
		clickNav(`form.logout button`),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
	)
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// documentCookies is what a script on the page would see of the cookies.
func documentCookies(ctx context.Context) ([]string, error) {
	var s string
	if err := chromedp.Evaluate(`document.cookie`, &s).Do(ctx); err != nil {
		return nil, err
	}
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, "; "), nil
}

// columnInts reads column col (1-based) of the groups table as numbers.
func columnInts(t *testing.T, ctx context.Context, col int) []int {
	t.Helper()
	var out []int
	for _, c := range column(t, ctx, col) {
		var n int
		fmt.Sscan(c, &n)
		out = append(out, n)
	}
	return out
}

// column reads column col (1-based) of the groups table.
func column(t *testing.T, ctx context.Context, col int) []string {
	t.Helper()
	var cells []string
	run(t, ctx, "read a column", chromedp.Evaluate(fmt.Sprintf(
		`Array.from(document.querySelectorAll("table.groups tbody tr td:nth-child(%d)")).map(td => td.textContent.trim())`, col), &cells))
	return cells
}

// topGroup is the id of the group on most boards, from the JSON API.
func topGroup(t *testing.T, base, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/groups?limit=1", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var gs []struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&gs); err != nil || len(gs) != 1 {
		t.Fatalf("GET /api/groups: %s, %v", resp.Status, err)
	}
	return gs[0].ID
}

// clickNav clicks what sel selects, as a person does, and waits until the
// browser has loaded the page it leads to: a new document, not the old
// one still on screen.
func clickNav(sel string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		mark := `document.documentElement.dataset.seen || (document.documentElement.dataset.seen = String(Date.now() + Math.random()))`
		var old string
		if err := chromedp.Evaluate(mark, &old).Do(ctx); err != nil {
			return err
		}
		if err := chromedp.Click(sel, chromedp.ByQuery).Do(ctx); err != nil {
			return err
		}
		for {
			var state, seen string
			err := chromedp.Evaluate(`document.readyState + " " + (document.documentElement.dataset.seen || "")`, &state).Do(ctx)
			if err == nil {
				seen = strings.TrimPrefix(state, "complete ")
				if strings.HasPrefix(state, "complete ") && seen != old {
					return nil
				}
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}
