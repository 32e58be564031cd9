package collector

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/report"
)

// fake is the synthetic part of a test report: which device, program,
// release and crash site.
type fake struct {
	id      int
	device  string
	exe     string
	signal  int
	offset  uint64 // frame 0's file offset in exe: the crash site
	release *report.Release
	attrs   map[string]string
	time    int64
}

// encode makes a report as a board would send it (zstd), with the
// release object and device attributes the report format carries.
func (f fake) encode(t testing.TB) []byte {
	t.Helper()
	r := report.Report{
		Version: 1, ID: fmt.Sprintf("%032x", f.id), Time: f.time, TimeTrusted: f.time > 0,
		DeviceID: f.device, Kernel: "6.1.0", Arch: "aarch64",
		Signal: report.Signal{Number: f.signal, Name: report.SignalName(f.signal)},
		PID:    100 + f.id, TID: 100 + f.id, Comm: filepath.Base(f.exe), Exe: f.exe,
		Modules: []report.Module{{Path: f.exe, BuildID: "00112233445566778899aabbccddeeff00112233", BuildIDKind: "gnu",
			Start: 0x400000, End: 0x500000, RuntimeOffset: 0x400000}},
		Threads: []report.Thread{{TID: 100 + f.id, Crashed: true, StopReason: "end", Frames: []report.Frame{
			{PC: report.Hex(0x400000 + f.offset), Method: "context", Trust: "high", Exact: true},
			{PC: 0x400100, Method: "cfi", Trust: "high"},
		}}},
	}
	r.Release = f.release
	if f.attrs != nil {
		r.Device = &report.Device{Attributes: f.attrs}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return report.Compress(js)
}

func open(t testing.TB, dir string, o Options) *Collector {
	t.Helper()
	c, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func put(t testing.TB, c *Collector, f fake) bool {
	t.Helper()
	_, stored, invalid, err := c.Put(f.encode(t), "")
	if err != nil || invalid != nil {
		t.Fatalf("put %d: %v %v", f.id, err, invalid)
	}
	return stored
}

var (
	rel1 = &report.Release{ID: "poky", VersionID: "5.0", ImageID: "gateway", ImageVersion: "2.4.0"}
	rel2 = &report.Release{ID: "poky", VersionID: "5.0", ImageID: "gateway", ImageVersion: "2.4.1"}
)

// A report is kept once, by id, and listed; its announced id must match.
func TestPutDeduplicates(t *testing.T) {
	c := open(t, t.TempDir(), Options{})
	f := fake{id: 1, device: "board-1", exe: "/usr/bin/gw", signal: 11, offset: 0x1234}
	if !put(t, c, f) {
		t.Fatal("first put not stored")
	}
	if put(t, c, f) {
		t.Fatal("second put stored again")
	}
	if _, _, invalid, _ := c.Put(f.encode(t), strings.Repeat("f", 32)); invalid == nil {
		t.Fatal("announced id mismatch accepted")
	}
	if _, _, invalid, _ := c.Put([]byte(`{"version":1,"id":"nothex"}`), ""); invalid == nil {
		t.Fatal("invalid report accepted")
	}
	list, err := c.List()
	if err != nil || len(list) != 1 || list[0].ID != fmt.Sprintf("%032x", 1) {
		t.Fatal(list, err)
	}
	gs, err := c.Groups(Filter{})
	if err != nil || len(gs) != 1 || gs[0].Count != 1 || gs[0].Boards != 1 {
		t.Fatalf("%+v %v", gs, err)
	}
	// No symbols anywhere: the signature is module+offset (the frame's
	// looked-up file address).
	if gs[0].Signature != "gw+0x1234" || gs[0].Symbolized {
		t.Fatalf("signature %q symbolized %v", gs[0].Signature, gs[0].Symbolized)
	}
}

// Groups: keyed by signature and signal, most boards first; every filter;
// per-release first and last seen; the "new in this release" mark.
func TestGroupsAndFilters(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	c := open(t, t.TempDir(), Options{Now: func() time.Time { return now }})
	id := 0
	add := func(device, exe string, sig int, off uint64, rel *report.Release, when time.Time) {
		id++
		put(t, c, fake{id: id, device: device, exe: exe, signal: sig, offset: off, release: rel,
			attrs: map[string]string{"hw_rev": "b" + device[len(device)-1:]}, time: when.Unix()})
	}
	day := 24 * time.Hour
	// Bug A: three boards, both releases.
	add("board-1", "/usr/bin/gw", 11, 0x100, rel1, now.Add(-5*day))
	add("board-2", "/usr/bin/gw", 11, 0x100, rel1, now.Add(-4*day))
	add("board-3", "/usr/bin/gw", 11, 0x100, rel2, now.Add(-1*day))
	add("board-3", "/usr/bin/gw", 11, 0x100, rel2, now)
	// Bug B: one board, many reports, new in 2.4.1.
	for i := 0; i < 5; i++ {
		add("board-4", "/usr/sbin/radiod", 6, 0x200, rel2, now.Add(-time.Duration(i)*time.Hour))
	}
	// Same site, another signal: another group. No release: unknown.
	add("board-5", "/usr/bin/gw", 7, 0x100, nil, now.Add(-10*day))

	gs, err := c.Groups(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range gs {
		got = append(got, fmt.Sprintf("%s/%s count=%d boards=%d new=%v first=%s", g.Signature, g.SignalName, g.Count, g.Boards, g.New, g.FirstRelease))
	}
	want := []string{
		"gw+0x100/SIGSEGV count=4 boards=3 new=false first=gateway 2.4.0",
		"radiod+0x200/SIGABRT count=5 boards=1 new=true first=gateway 2.4.1",
		"gw+0x100/SIGBUS count=1 boards=1 new=false first=unknown",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("groups:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	a := gs[0]
	if len(a.Releases) != 2 || a.Releases[0].Value != "gateway 2.4.0" || a.Releases[0].Count != 2 ||
		!a.Releases[0].FirstSeen.Equal(now.Add(-5*day)) || !a.Releases[1].LastSeen.Equal(now) {
		t.Fatalf("releases %+v", a.Releases)
	}
	for _, tc := range []struct {
		f    Filter
		want int
	}{
		{Filter{Release: "gateway 2.4.0"}, 1},
		{Filter{Release: "2.4.1"}, 2},
		{Filter{Release: "4.1"}, 0},
		{Filter{Release: "unknown"}, 1},
		{Filter{Program: "radiod"}, 1},
		{Filter{Program: "/usr/bin/gw"}, 2},
		{Filter{Program: "bin/gw"}, 2},
		{Filter{Program: "w"}, 0},
		{Filter{Device: "board-3"}, 1},
		{Filter{Signal: 6}, 1},
		{Filter{Since: now.Add(-2 * day)}, 2},
		{Filter{Limit: 1}, 1},
	} {
		gs, err := c.Groups(tc.f)
		if err != nil || len(gs) != tc.want {
			t.Errorf("%+v: %d groups, want %d (%v)", tc.f, len(gs), tc.want, err)
		}
	}
	if gs, _ := c.Groups(Filter{Order: "count"}); gs[0].Signature != "radiod+0x200" {
		t.Errorf("order count: %s first", gs[0].Signature)
	}

	d, err := c.Group(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Devices) != 3 || d.Devices[0].Value != "board-3" || d.Devices[0].Count != 2 ||
		len(d.Days) != 4 || len(d.Attributes["hw_rev"]) != 3 || d.Kernels[0].Value != "6.1.0" {
		t.Fatalf("detail %+v", d)
	}
	reps, err := c.Reports(ReportQuery{Group: a.ID})
	if err != nil || len(reps) != 4 || reps[0].Release == "" {
		t.Fatal(reps, err)
	}
	rd, err := c.Report(reps[0].ID)
	if err != nil || rd.Result == nil || len(rd.Result.Threads) != 1 || rd.Attributes["hw_rev"] == "" || rd.ReleaseInfo.ImageID != "gateway" {
		t.Fatalf("%+v %v", rd, err)
	}
	rels, err := c.Releases()
	if err != nil || len(rels) != 3 || rels[0].Label != "unknown" || rels[2].Label != "gateway 2.4.1" || rels[2].Reports != 7 {
		t.Fatalf("%+v %v", rels, err)
	}
	if _, err := c.Group("000000000000"); err == nil {
		t.Fatal("unknown group found")
	}
}

// Retention: by age, then by bytes, oldest first; groups keep their
// counts and boards; a pruned report offered again stays a duplicate.
func TestPruneKeepsCounts(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	clock := now.Add(-30 * 24 * time.Hour)
	o := Options{Now: func() time.Time { return clock }, KeepDays: 25}
	dir := t.TempDir()
	c := open(t, dir, o)
	var fs []fake
	for i := 1; i <= 20; i++ {
		f := fake{id: i, device: fmt.Sprintf("board-%d", i%7), exe: "/usr/bin/gw", signal: 11, offset: 0x100}
		fs = append(fs, f)
		put(t, c, f)
		clock = clock.Add(24 * time.Hour) // one report a day, days 30..11 ago
	}
	clock = now
	res, err := c.Prune()
	if err != nil || res.Reports != 5 { // received 30..26 days ago go
		t.Fatalf("%+v %v", res, err)
	}
	gs, _ := c.Groups(Filter{})
	if gs[0].Count != 20 || gs[0].Boards != 7 || gs[0].Kept != 15 {
		t.Fatalf("after age pruning: %+v", gs[0])
	}
	if put(t, c, fs[0]) {
		t.Fatal("a pruned report was stored again")
	}
	// Now by bytes: keep about half of what is left.
	list, _ := c.List()
	var total int64
	for _, s := range list {
		total += s.Size
	}
	c.opts.MaxBytes = total / 2
	if _, err := c.Prune(); err != nil {
		t.Fatal(err)
	}
	after, _ := c.List()
	var left int64
	for _, s := range after {
		left += s.Size
	}
	if left > total/2 || len(after) < 5 || after[0].ID <= list[0].ID {
		t.Fatalf("by bytes: %d reports, %d bytes left of %d (max %d)", len(after), left, total, total/2)
	}
	gs, _ = c.Groups(Filter{})
	if gs[0].Count != 20 || gs[0].Boards != 7 || gs[0].Kept != len(after) || gs[0].Sample != after[len(after)-1].ID {
		t.Fatalf("after byte pruning: %+v", gs[0])
	}
}

// A database made by the first schema is migrated: its reports stay,
// the new columns get their defaults, the day facets are backfilled.
func TestMigrateFromV1(t *testing.T) {
	dir := t.TempDir()
	db, err := openDB(filepath.Join(dir, DBName), synchronous)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(db, 1); err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 10, 1, 8, 0, 0, 0, time.UTC).Unix()
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO groups VALUES ('aaaaaaaaaaaa', 'main', 11, 1, 2, %d, %d, '%032x', NULL)`, seen, seen+60, 7),
		fmt.Sprintf(`INSERT INTO reports VALUES ('%032x', %d, %d, 'b1', '/bin/x', 'arm', '6.1', 11, 'unknown', 'aaaaaaaaaaaa', 'main', 0, x'00', NULL, 1)`, 7, seen, seen),
		fmt.Sprintf(`INSERT INTO reports VALUES ('%032x', %d, %d, 'b2', '/bin/x', 'arm', '6.1', 11, 'unknown', 'aaaaaaaaaaaa', 'main', 0, x'00', NULL, 1)`, 8, seen+60, seen+60),
		fmt.Sprintf(`INSERT INTO facets VALUES ('aaaaaaaaaaaa', 'device', 'b1', 1, %d, %d), ('aaaaaaaaaaaa', 'device', 'b2', 1, %d, %d)`, seen, seen, seen+60, seen+60),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	db.Close()

	c := open(t, dir, Options{})
	var v int
	c.db.QueryRow(`PRAGMA user_version`).Scan(&v)
	if v != SchemaVersion || v < 2 {
		t.Fatalf("user_version %d, want %d", v, SchemaVersion)
	}
	var relJSON string
	if err := c.db.QueryRow(`SELECT release_json FROM reports WHERE id = ?`, fmt.Sprintf("%032x", 7)).Scan(&relJSON); err != nil || relJSON != "{}" {
		t.Fatal(relJSON, err)
	}
	d, err := c.Group("aaaaaaaaaaaa")
	if err != nil || len(d.Days) != 1 || d.Days[0].Value != "2026-10-01" || d.Days[0].Count != 2 || d.Boards != 2 {
		t.Fatalf("%+v %v", d, err)
	}
	// A database from a newer unwound is refused.
	c.db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, SchemaVersion+1))
	c.Close()
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("newer schema: %v", err)
	}
}

// Concurrent puts: every report stored once, the group's count exact.
func TestConcurrentPuts(t *testing.T) {
	c := open(t, t.TempDir(), Options{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				// Every worker offers every report: dedup under races.
				f := fake{id: i + 1, device: fmt.Sprintf("b%d", i%5), exe: "/bin/x", signal: 11, offset: 0x10}
				c.Put(f.encode(t), "")
			}
		}(w)
	}
	wg.Wait()
	gs, _ := c.Groups(Filter{})
	if len(gs) != 1 || gs[0].Count != 25 || gs[0].Kept != 25 || gs[0].Boards != 5 {
		t.Fatalf("%+v", gs)
	}
	var n int
	c.db.QueryRow(`SELECT sum(count) FROM facets WHERE facet = 'device'`).Scan(&n)
	if n != 25 {
		t.Fatalf("device facets count %d reports", n)
	}
	var mode string
	c.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode)
	var sync int
	c.db.QueryRow(`PRAGMA synchronous`).Scan(&sync)
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode %s synchronous %d: want wal, 2 (FULL)", mode, sync)
	}
}

// Collect puts report files into a collector and says their groups,
// again without storing twice.
func TestCollect(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(t.TempDir(), "r.json.zst")
	if err := os.WriteFile(f, fake{id: 3, device: "demo", exe: "/usr/bin/crash", signal: 11, offset: 0x42}.encode(t), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		gs, err := Collect(filepath.Join(dir, "collector"), Options{}, f)
		if err != nil || len(gs) != 1 || gs[0].Signature != "crash+0x42" || gs[0].Count != 1 {
			t.Fatalf("%+v %v", gs, err)
		}
	}
}

// The API over HTTP answers what the Collector does: Client against API.
func TestAPIClient(t *testing.T) {
	c := open(t, t.TempDir(), Options{})
	for i := 1; i <= 3; i++ {
		put(t, c, fake{id: i, device: fmt.Sprintf("b%d", i), exe: "/usr/bin/gw", signal: 11, offset: 0x100, release: rel1, attrs: map[string]string{"hw_rev": "b"}})
	}
	put(t, c, fake{id: 9, device: "b9", exe: "/usr/bin/radiod", signal: 6, offset: 0x200, release: rel2})
	srv := httptest.NewServer(receive.Guard("tok", API(c)))
	defer srv.Close()
	cl := &Client{URL: srv.URL, Token: "tok"}
	gs, err := cl.Groups(Filter{Program: "gw"})
	if err != nil || len(gs) != 1 || gs[0].Count != 3 || gs[0].Boards != 3 {
		t.Fatalf("%+v %v", gs, err)
	}
	d, err := cl.Group(gs[0].ID)
	if err != nil || len(d.Attributes["hw_rev"]) != 1 || d.Attributes["hw_rev"][0].Count != 3 {
		t.Fatalf("%+v %v", d, err)
	}
	reps, err := cl.Reports(ReportQuery{Group: gs[0].ID, Limit: 2})
	if err != nil || len(reps) != 2 {
		t.Fatal(reps, err)
	}
	r, err := cl.Report(reps[0].ID)
	if err != nil || r.Result == nil || len(r.Result.Report.Modules) != 1 || r.Result.Report.Modules[0].Path != "/usr/bin/gw" {
		t.Fatalf("%+v %v", r, err)
	}
	progs, err := cl.Values("program")
	if err != nil || len(progs) != 2 || progs[0].Value != "/usr/bin/gw" || progs[0].Count != 3 {
		t.Fatal(progs, err)
	}
	rels, err := cl.Releases()
	if err != nil || len(rels) != 2 {
		t.Fatal(rels, err)
	}
	if _, err := cl.Group("ffffffffffff"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
	if _, err := (&Client{URL: srv.URL}).Groups(Filter{}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v", err)
	}
	if _, err := cl.Groups(Filter{Order: "sideways"}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("bad order: %v", err)
	}
	res, err := cl.Resymbolize()
	if err != nil || res.Reports != 4 || res.Regrouped != 0 {
		t.Fatalf("%+v %v", res, err)
	}
}

// DIR/signature.toml extends the built-in rules for every opener; a
// broken one is an error that names it.
func TestRulesFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, RulesFile), []byte("prefix = ['^gw\\+0x100$']\n"), 0o644)
	c := open(t, dir, Options{})
	put(t, c, fake{id: 1, device: "b1", exe: "/usr/bin/gw", signal: 11, offset: 0x100})
	gs, _ := c.Groups(Filter{})
	if len(gs) != 1 || gs[0].Signature != "gw+0x100 | gw+0xff" {
		t.Fatalf("%+v", gs)
	}
	c.Close()
	os.WriteFile(filepath.Join(dir, RulesFile), []byte("skip = ['(']\n"), 0o644)
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), RulesFile) || !strings.Contains(err.Error(), "skip[0]") {
		t.Fatalf("broken rules: %v", err)
	}
}
