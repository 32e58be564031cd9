package collector

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// ErrNotFound says no group or report has the id asked for.
var ErrNotFound = errors.New("not found")

// Reader is the collector's read API: a Collector reads its database, a
// Client asks a running collector over HTTP (the JSON endpoints of API).
type Reader interface {
	// Groups lists the groups that match f, most boards first (f.Order).
	Groups(f Filter) ([]Group, error)
	// Group is one group with its per-facet counts. A group merged into
	// another by regrouping is followed: the result's ID is the new one.
	Group(id string) (*GroupDetail, error)
	// Reports lists the kept reports that match q, newest first.
	Reports(q ReportQuery) ([]ReportInfo, error)
	// Report is one kept report, decoded and symbolized.
	Report(id string) (*ReportDetail, error)
	// Releases lists the releases seen, oldest first.
	Releases() ([]ReleaseInfo, error)
	// Values lists every value of a facet across the groups (program,
	// device, kernel, arch, release, attr:KEY), most reports first: the
	// choices of a filter.
	Values(facet string) ([]Facet, error)
	// Resymbolize symbolizes again the reports whose frames lacked
	// symbols, with the symbols there are now, and regroups them.
	Resymbolize() (ResymbolizeResult, error)
}

var _ Reader = (*Collector)(nil)

// Filter selects groups. Zero fields select everything. Release, Program
// and Device select groups with at least one report from that release,
// program (its path, or its base name) or device.
type Filter struct {
	Since   time.Time // last seen at or after
	Release string    // a release label (Release.Label), its version alone, or "unknown"
	Program string
	Device  string
	Signal  int    // a signal number
	Order   string // boards (default), count, last, first, signature
	Limit   int    // 0: all
}

// Group is one row of the groups table.
type Group struct {
	ID         string    `json:"id"`
	Signature  string    `json:"signature"`
	Signal     int       `json:"signal"`
	SignalName string    `json:"signal_name"`
	Symbolized bool      `json:"symbolized"` // false: named by module+offset somewhere
	Count      int       `json:"count"`      // reports ever (pruned ones too)
	Boards     int       `json:"boards"`     // distinct devices
	Kept       int       `json:"kept"`       // reports still in the database
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
	Sample     string    `json:"sample,omitempty"` // a kept report's id
	Programs   []string  `json:"programs"`
	// Releases the group appears in, oldest first, with first and last
	// seen in each. FirstRelease is the release it first appeared in;
	// New is true when that is the newest release the collector has
	// seen (a "new in this release" mark).
	Releases     []Facet `json:"releases"`
	FirstRelease string  `json:"first_release"`
	New          bool    `json:"new"`
}

// Facet is how many of a group's reports had one value of a facet, and
// when they were seen.
type Facet struct {
	Value     string    `json:"value"`
	Count     int       `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

// GroupDetail is a group with every facet: what the group page shows.
type GroupDetail struct {
	Group
	Devices    []Facet            `json:"devices"`    // most reports first
	Kernels    []Facet            `json:"kernels"`    // most reports first
	Arches     []Facet            `json:"arches"`     // most reports first
	Days       []Facet            `json:"days"`       // crashes per day (YYYY-MM-DD, UTC), oldest first
	Attributes map[string][]Facet `json:"attributes"` // per device attribute key, most reports first
	// MergedFrom are groups whose reports regrouping moved here.
	MergedFrom []string `json:"merged_from,omitempty"`
}

// ReportQuery selects reports.
type ReportQuery struct {
	Group string // a group id ("": every group)
	Since time.Time
	Limit int // 0: all
}

// ReportInfo is one row of a report list.
type ReportInfo struct {
	ID         string    `json:"id"`
	Received   time.Time `json:"received"`
	Seen       time.Time `json:"seen"` // the report's time when trusted, else received
	Device     string    `json:"device"`
	Program    string    `json:"program"`
	Arch       string    `json:"arch"`
	Kernel     string    `json:"kernel"`
	Signal     int       `json:"signal"`
	SignalName string    `json:"signal_name"`
	Release    string    `json:"release"`
	Group      string    `json:"group"`
	Signature  string    `json:"signature"`
	Missing    int       `json:"missing"` // crashed-thread frames without a symbol
	Size       int64     `json:"size"`
}

// ReportDetail is one report: its row, the release and attributes it
// carried, and the symbolized report (every thread, every frame's trust).
type ReportDetail struct {
	ReportInfo
	ReleaseInfo Release           `json:"release_info"`
	Attributes  map[string]string `json:"attributes,omitempty"`
	Result      *symbolize.Result `json:"result"`
}

// ReleaseInfo is one release the collector has seen.
type ReleaseInfo struct {
	Label     string    `json:"label"`
	Reports   int       `json:"reports"` // reports ever
	Groups    int       `json:"groups"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

func fromUnix(s int64) time.Time { return time.Unix(s, 0).UTC() }

// groupsOrder are the orders Groups knows, as SQL.
var groupsOrder = map[string]string{
	"":          "boards DESC, g.count DESC, g.last_seen DESC",
	"boards":    "boards DESC, g.count DESC, g.last_seen DESC",
	"count":     "g.count DESC, boards DESC, g.last_seen DESC",
	"last":      "g.last_seen DESC, boards DESC",
	"first":     "g.first_seen DESC, boards DESC",
	"signature": "g.signature, g.signal",
}

// Groups lists the groups that match f.
func (c *Collector) Groups(f Filter) ([]Group, error) {
	order, ok := groupsOrder[f.Order]
	if !ok {
		return nil, fmt.Errorf("order %q: want boards, count, last, first or signature", f.Order)
	}
	var where []string
	var args []any
	// A group whose every report moved elsewhere by regrouping is empty.
	where = append(where, "g.merged_into IS NULL", "g.count > 0")
	if !f.Since.IsZero() {
		where = append(where, "g.last_seen >= ?")
		args = append(args, f.Since.Unix())
	}
	if f.Signal != 0 {
		where = append(where, "g.signal = ?")
		args = append(args, f.Signal)
	}
	has := func(facet, value string) {
		where = append(where, "EXISTS (SELECT 1 FROM facets x WHERE x.group_id = g.id AND x.facet = ? AND x.value = ? AND x.count > 0)")
		args = append(args, facet, value)
	}
	if f.Release != "" {
		// A label ("gateway 2.4.1") or its version alone ("2.4.1").
		where = append(where, `EXISTS (SELECT 1 FROM facets x WHERE x.group_id = g.id AND x.facet = 'release' AND x.count > 0
			AND (x.value = ? OR x.value LIKE '% ' || ? ESCAPE '\'))`)
		args = append(args, f.Release, likeEscape(f.Release))
	}
	if f.Device != "" {
		has("device", f.Device)
	}
	if f.Program != "" {
		// A path names one program; a base name every program of that
		// name.
		where = append(where, `EXISTS (SELECT 1 FROM facets x WHERE x.group_id = g.id AND x.facet = 'program' AND x.count > 0
			AND (x.value = ? OR x.value LIKE '%/' || ? ESCAPE '\'))`)
		args = append(args, f.Program, likeEscape(f.Program))
	}
	q := `SELECT g.id, g.signature, g.signal, g.symbolized, g.count, g.first_seen, g.last_seen, coalesce(g.sample, ''),
		(SELECT count(*) FROM facets d WHERE d.group_id = g.id AND d.facet = 'device' AND d.count > 0) AS boards,
		(SELECT count(*) FROM reports r WHERE r.group_id = g.id) AS kept
		FROM groups g WHERE ` + strings.Join(where, " AND ") + ` ORDER BY ` + order
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := c.db.Query(q, args...)
	if err != nil {
		return nil, err
	}
	var out []Group
	for rows.Next() {
		var g Group
		var first, last int64
		if err := rows.Scan(&g.ID, &g.Signature, &g.Signal, &g.Symbolized, &g.Count, &first, &last, &g.Sample, &g.Boards, &g.Kept); err != nil {
			rows.Close()
			return nil, err
		}
		g.FirstSeen, g.LastSeen = fromUnix(first), fromUnix(last)
		g.SignalName = report.SignalName(g.Signal)
		out = append(out, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	newest, err := c.newestRelease()
	if err != nil {
		return nil, err
	}
	for i := range out {
		if err := c.fillGroup(&out[i], newest); err != nil {
			return nil, err
		}
	}
	if out == nil {
		out = []Group{}
	}
	return out, nil
}

func likeEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
}

// fillGroup adds a group's programs and releases.
func (c *Collector) fillGroup(g *Group, newest string) error {
	progs, err := c.facets(g.ID, "program", "count DESC, value")
	if err != nil {
		return err
	}
	g.Programs = []string{}
	for _, p := range progs {
		g.Programs = append(g.Programs, p.Value)
	}
	if g.Releases, err = c.facets(g.ID, "release", "first_seen, value"); err != nil {
		return err
	}
	if len(g.Releases) > 0 {
		g.FirstRelease = g.Releases[0].Value
		g.New = g.FirstRelease == newest && newest != Unknown
	}
	return nil
}

// newestRelease is the release first seen last.
func (c *Collector) newestRelease() (string, error) {
	var label string
	err := c.db.QueryRow(`SELECT value FROM facets WHERE facet = 'release' AND value != 'unknown'
		GROUP BY value ORDER BY min(first_seen) DESC, value DESC LIMIT 1`).Scan(&label)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return label, err
}

// facets returns a group's values of one facet.
func (c *Collector) facets(group, facet, order string) ([]Facet, error) {
	rows, err := c.db.Query(`SELECT value, count, first_seen, last_seen FROM facets
		WHERE group_id = ? AND facet = ? AND count > 0 ORDER BY `+order, group, facet)
	return scanFacets(rows, err)
}

// scanFacets reads rows of (value, count, first_seen, last_seen).
func scanFacets(rows *sql.Rows, err error) ([]Facet, error) {
	return scanAll(rows, err, func(sc scanner) (f Facet, err error) {
		var first, last int64
		err = sc.Scan(&f.Value, &f.Count, &first, &last)
		f.FirstSeen, f.LastSeen = fromUnix(first), fromUnix(last)
		return f, err
	})
}

// scanner is a row: *sql.Rows or *sql.Row.
type scanner interface{ Scan(...any) error }

// scanAll reads every row of a query with one, closing the rows: a list
// is empty, never nil (JSON [], not null).
func scanAll[T any](rows *sql.Rows, err error, one func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := one(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// resolveGroup follows merged_into to the group that holds id's reports.
func (c *Collector) resolveGroup(id string) (string, error) {
	for i := 0; i < 16; i++ {
		var into sql.NullString
		err := c.db.QueryRow(`SELECT merged_into FROM groups WHERE id = ?`, id).Scan(&into)
		if errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("group %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return "", err
		}
		if !into.Valid {
			return id, nil
		}
		id = into.String
	}
	return "", fmt.Errorf("group %s: merged in a loop", id)
}

// Group is one group with every facet.
func (c *Collector) Group(id string) (*GroupDetail, error) {
	id, err := c.resolveGroup(strings.ToLower(id))
	if err != nil {
		return nil, err
	}
	d := &GroupDetail{Attributes: map[string][]Facet{}}
	g := &d.Group
	var first, last int64
	err = c.db.QueryRow(`SELECT g.id, g.signature, g.signal, g.symbolized, g.count, g.first_seen, g.last_seen, coalesce(g.sample, ''),
		(SELECT count(*) FROM facets d WHERE d.group_id = g.id AND d.facet = 'device' AND d.count > 0),
		(SELECT count(*) FROM reports r WHERE r.group_id = g.id)
		FROM groups g WHERE g.id = ?`, id).Scan(&g.ID, &g.Signature, &g.Signal, &g.Symbolized, &g.Count, &first, &last, &g.Sample, &g.Boards, &g.Kept)
	if err != nil {
		return nil, err
	}
	g.FirstSeen, g.LastSeen = fromUnix(first), fromUnix(last)
	g.SignalName = report.SignalName(g.Signal)
	newest, err := c.newestRelease()
	if err != nil {
		return nil, err
	}
	if err := c.fillGroup(g, newest); err != nil {
		return nil, err
	}
	for _, x := range []struct {
		dst         *[]Facet
		facet, sort string
	}{
		{&d.Devices, "device", "count DESC, value"},
		{&d.Kernels, "kernel", "count DESC, value"},
		{&d.Arches, "arch", "count DESC, value"},
		{&d.Days, "day", "value"},
	} {
		if *x.dst, err = c.facets(id, x.facet, x.sort); err != nil {
			return nil, err
		}
	}
	rows, err := c.db.Query(`SELECT DISTINCT substr(facet, 6) FROM facets WHERE group_id = ? AND facet LIKE 'attr:%' ORDER BY 1`, id)
	if err != nil {
		return nil, err
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	for _, k := range keys {
		if d.Attributes[k], err = c.facets(id, "attr:"+k, "count DESC, value"); err != nil {
			return nil, err
		}
	}
	rows, err = c.db.Query(`SELECT id FROM groups WHERE merged_into = ? ORDER BY id`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return nil, err
		}
		d.MergedFrom = append(d.MergedFrom, m)
	}
	return d, rows.Err()
}

const reportCols = `id, received, seen, device, program, arch, kernel, signal, release, group_id, signature, missing, size`

// scanInfo reads the reportCols of a row, then into more the columns
// selected after them.
func scanInfo(sc scanner, more ...any) (ReportInfo, error) {
	var ri ReportInfo
	var rec, seen int64
	err := sc.Scan(append([]any{&ri.ID, &rec, &seen, &ri.Device, &ri.Program, &ri.Arch, &ri.Kernel, &ri.Signal, &ri.Release, &ri.Group, &ri.Signature, &ri.Missing, &ri.Size}, more...)...)
	ri.Received, ri.Seen = fromUnix(rec), fromUnix(seen)
	ri.SignalName = report.SignalName(ri.Signal)
	return ri, err
}

// Reports lists kept reports, newest first.
func (c *Collector) Reports(q ReportQuery) ([]ReportInfo, error) {
	var where []string
	var args []any
	if q.Group != "" {
		id, err := c.resolveGroup(strings.ToLower(q.Group))
		if err != nil {
			return nil, err
		}
		where = append(where, "group_id = ?")
		args = append(args, id)
	}
	if !q.Since.IsZero() {
		where = append(where, "received >= ?")
		args = append(args, q.Since.Unix())
	}
	sqlq := `SELECT ` + reportCols + ` FROM reports`
	if len(where) > 0 {
		sqlq += " WHERE " + strings.Join(where, " AND ")
	}
	sqlq += " ORDER BY received DESC, id"
	if q.Limit > 0 {
		sqlq += fmt.Sprintf(" LIMIT %d", q.Limit)
	}
	rows, err := c.db.Query(sqlq, args...)
	return scanAll(rows, err, func(sc scanner) (ReportInfo, error) { return scanInfo(sc) })
}

// Report is one kept report, decoded and symbolized. A report id prefix
// of at least 8 hex digits names the report when it is unique.
func (c *Collector) Report(id string) (*ReportDetail, error) {
	id, err := c.reportID(strings.ToLower(id))
	if err != nil {
		return nil, err
	}
	var symb []byte
	var relJSON, attrJSON string
	row := c.db.QueryRow(`SELECT `+reportCols+`, symbolized, release_json, attributes FROM reports WHERE id = ?`, id)
	ri, err := scanInfo(row, &symb, &relJSON, &attrJSON)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("report %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	d := &ReportDetail{ReportInfo: ri}
	json.Unmarshal([]byte(relJSON), &d.ReleaseInfo)
	json.Unmarshal([]byte(attrJSON), &d.Attributes)
	if d.Result, err = decodeResult(symb); err != nil {
		return nil, fmt.Errorf("report %s: %w", id, err)
	}
	return d, nil
}

// Raw returns a kept report's bytes as received (zstd).
func (c *Collector) Raw(id string) ([]byte, error) {
	id, err := c.reportID(strings.ToLower(id))
	if err != nil {
		return nil, err
	}
	var raw []byte
	if err := c.db.QueryRow(`SELECT raw FROM reports WHERE id = ?`, id).Scan(&raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// reportID resolves a full id or a unique prefix of at least 8 digits.
func (c *Collector) reportID(id string) (string, error) {
	if len(id) == 32 {
		return id, nil
	}
	if len(id) < 8 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("report %s: %w", id, ErrNotFound)
	}
	rows, err := c.db.Query(`SELECT id FROM reports WHERE id >= ? AND id < ? LIMIT 2`, id, id+"g")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		ids = append(ids, s)
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("report %s: %w", id, ErrNotFound)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("report id prefix %s names more than one report", id)
}

// zdec decodes the stored symbolized results.
var zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(4*decode.MaxDecoded))

func decodeResult(b []byte) (*symbolize.Result, error) {
	if len(b) == 0 {
		return nil, nil
	}
	js, err := zdec.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("stored symbols: %w", err)
	}
	var res symbolize.Result
	if err := json.Unmarshal(js, &res); err != nil {
		return nil, fmt.Errorf("stored symbols: %w", err)
	}
	if res.Report == nil {
		return nil, errors.New("stored symbols: no report")
	}
	fixResult(&res)
	return &res, nil
}

// fixResult mends a symbolize.Result read from JSON: its modules and
// threads shadow the report's, which it gets back.
func fixResult(res *symbolize.Result) {
	if res == nil || res.Report == nil {
		return
	}
	res.Report.Modules = make([]report.Module, len(res.Modules))
	for i, m := range res.Modules {
		res.Report.Modules[i] = m.Module
	}
	res.Report.Threads = make([]report.Thread, len(res.Threads))
	for i, t := range res.Threads {
		th := t.Thread
		th.Frames = make([]report.Frame, len(t.Frames))
		for j, f := range t.Frames {
			th.Frames[j] = f.Frame
		}
		res.Report.Threads[i] = th
	}
}

// Releases lists the releases seen, oldest first.
func (c *Collector) Releases() ([]ReleaseInfo, error) {
	rows, err := c.db.Query(`SELECT value, sum(count), count(DISTINCT group_id), min(first_seen), max(last_seen)
		FROM facets WHERE facet = 'release' GROUP BY value ORDER BY min(first_seen), value`)
	return scanAll(rows, err, func(sc scanner) (r ReleaseInfo, err error) {
		var first, last int64
		err = sc.Scan(&r.Label, &r.Reports, &r.Groups, &first, &last)
		r.FirstSeen, r.LastSeen = fromUnix(first), fromUnix(last)
		return r, err
	})
}

// Values lists every value of a facet across the groups.
func (c *Collector) Values(facet string) ([]Facet, error) {
	rows, err := c.db.Query(`SELECT value, sum(count), min(first_seen), max(last_seen) FROM facets
		WHERE facet = ? AND count > 0 GROUP BY value ORDER BY sum(count) DESC, value`, facet)
	return scanFacets(rows, err)
}

// List returns the kept reports, oldest first: GET /reports.
func (c *Collector) List() ([]receive.Stored, error) {
	rows, err := c.db.Query(`SELECT id, size, received FROM reports ORDER BY received, id`)
	return scanAll(rows, err, func(sc scanner) (s receive.Stored, err error) {
		var rec int64
		err = sc.Scan(&s.ID, &s.Size, &rec)
		s.Received = fromUnix(rec)
		return s, err
	})
}
