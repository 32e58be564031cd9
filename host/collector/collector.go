// Package collector is a fleet's crash store: every report a collector
// receives (over HTTP from unwound serve, or handed over by unwound
// receive) is kept in one SQLite database file, DIR/unwound.db, with its
// raw bytes, its symbolized trace and its signature; reports with one
// signature and signal form a group, whose numbers (count, boards,
// releases, first and last seen) outlive the reports themselves.
//
// The database is SQLite's own advice followed: WAL mode, one writer,
// short transactions, PRAGMA user_version migrations (schema.go), and
// synchronous=FULL, so that a report acknowledged to an uploader survives
// a power cut as well as a kill -9 (docs/collector.md says why NORMAL is
// not enough). The database is one file a user can copy (with its -wal
// beside it while a collector runs).
//
// The read API (Groups, Group, Reports, Report, Releases) is what the CLI
// (unwound crashes), the JSON endpoints under /api/ (API) and the web page
// read; Client is the same API over HTTP.
package collector

import (
	"bytes"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite", pure Go

	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/host/signature"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/report/zstdenc"
)

// DBName is the database's file name under the collector's directory.
const DBName = "unwound.db"

// SymbolsDir is the build-id tree under the collector's directory that
// unwound symbols add fills (DIR/symbols/.build-id/ab/cdef….debug); the
// file Generation in it is touched after each addition.
const SymbolsDir = "symbols"

// RulesFile is the project's own signature rules under the collector's
// directory (host/signature's TOML), added to the built-in ones.
const RulesFile = "signature.toml"

// Generation is the file under SymbolsDir whose change means new symbols.
const Generation = "generation"

// Options configure a collector.
type Options struct {
	// DebugDirs, Sysroot and Debuginfod are where symbols are found, as
	// for unwound symbolize; DIR/symbols is always searched first. Report
	// paths name the board's files, not the host's: the default Sysroot
	// is DIR/sysroot (a board's root filesystem, when there is one).
	DebugDirs  []string
	Sysroot    string
	Debuginfod *symbolize.Debuginfod
	// Rules are the signature rules (default: signature.Default(),
	// extended by DIR/signature.toml when there is one, so that every
	// command opening the directory groups alike).
	Rules *signature.Rules
	// KeepDays prunes reports received more than this many days ago
	// (0: keep them); MaxBytes prunes the oldest reports while the kept
	// reports' bytes exceed it (0: no bound). Groups keep their counts.
	KeepDays int
	MaxBytes int64
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
	Log func(format string, args ...any)
}

// Stored is what OnStored receives about a report just committed.
type Stored struct {
	ID        string
	Raw       []byte // as received, zstd
	Report    *report.Report
	Result    *symbolize.Result // the symbolized report
	Frames    []signature.Frame // the crashed thread's symbolized frames
	Signature signature.Signature
	Group     string // the group's id
	Release   Release
}

// Collector is an open collector directory. Its methods are safe for
// concurrent use.
type Collector struct {
	// OnStored, when set, is called after a new report's transaction
	// commits, before Put returns (so before the uploader is answered).
	// It must not block for long: a forwarder hands the report to its
	// own queue. Set it before the first Put.
	OnStored func(Stored)

	dir   string
	db    *sql.DB
	opts  Options
	rules *signature.Rules

	wmu sync.Mutex // one writer in this process; SQLite's lock across processes

	smu  sync.Mutex // the symbolizer is not safe for concurrent use
	sym  *symbolize.Symbolizer
	sgen string // the symbols generation sym was made at

	enc *zstd.Encoder

	putMu sync.Mutex
	puts  int

	stop chan struct{}
	done sync.WaitGroup
}

// Open opens the collector in dir, creating the directory and the
// database, or migrating an older database, as needed.
func Open(dir string, o Options) (*Collector, error) {
	if dir == "" {
		return nil, errors.New("collector: no directory")
	}
	if err := os.MkdirAll(filepath.Join(dir, SymbolsDir), 0o755); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Rules == nil {
		o.Rules = signature.Default()
		b, err := os.ReadFile(filepath.Join(dir, RulesFile))
		if err == nil {
			extra, err := signature.Parse(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(dir, RulesFile), err)
			}
			o.Rules = o.Rules.Extend(extra)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if o.Sysroot == "" {
		o.Sysroot = filepath.Join(dir, "sysroot")
	}
	db, err := openDB(filepath.Join(dir, DBName), synchronous)
	if err != nil {
		return nil, err
	}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, DBName), err)
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	c := &Collector{dir: dir, db: db, opts: o, rules: o.Rules, enc: enc, stop: make(chan struct{})}
	return c, nil
}

// synchronous is SQLite's synchronous setting: FULL, so that an
// acknowledged report survives a power cut (docs/collector.md). The
// benchmark compares it with NORMAL.
var synchronous = "FULL"

// openDB opens the SQLite file with the pragmas every connection needs.
func openDB(path, sync string) (*sql.DB, error) {
	dsn := "file:" + path + "?" + strings.Join([]string{
		"_pragma=busy_timeout(10000)",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(" + sync + ")",
		"_pragma=foreign_keys(1)",
		"_pragma=auto_vacuum(INCREMENTAL)",
		"_txlock=immediate",
	}, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return db, nil
}

// Dir is the collector's directory.
func (c *Collector) Dir() string { return c.dir }

// String says where reports go, for logs.
func (c *Collector) String() string { return filepath.Join(c.dir, DBName) }

// Close stops the background work and closes the database.
func (c *Collector) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.done.Wait()
	c.smu.Lock()
	if c.sym != nil {
		c.sym.Close()
		c.sym = nil
	}
	c.smu.Unlock()
	return c.db.Close()
}

// Has reports whether the report id was received (kept or pruned).
func (c *Collector) Has(id string) bool {
	var n int
	err := c.db.QueryRow(`SELECT (SELECT count(*) FROM reports WHERE id = ?1) + (SELECT count(*) FROM gone WHERE id = ?1)`, id).Scan(&n)
	return err == nil && n > 0
}

// Put validates data (zstd or plain JSON) as a report, symbolizes it,
// names it and stores it; it returns once the transaction has committed.
// wantID, when set, must be the report's id. It returns the report,
// whether it was new (false: a duplicate, kept or pruned), and a
// validation error (the sender's fault) or a local one.
func (c *Collector) Put(data []byte, wantID string) (r *report.Report, stored bool, invalid, err error) {
	// Decompressed once: the report and its extras read the same JSON.
	js, derr := decode.JSON(data)
	if derr == nil {
		r, derr = decode.Report(js)
	}
	if derr != nil {
		return nil, false, derr, nil
	}
	if wantID != "" && wantID != r.ID {
		return nil, false, fmt.Errorf("report id %s, but %s was announced", r.ID, wantID), nil
	}
	if c.Has(r.ID) {
		return r, false, nil, nil
	}
	extra := extras(js)
	if !bytes.HasPrefix(data, []byte(zstdenc.Magic)) {
		data = report.Compress(data)
	}
	res, frames := c.symbolize(r)
	sig := c.rules.Of(frames)
	in := c.ingest(r, data, res, frames, sig, extra, c.opts.Now().Unix())
	c.wmu.Lock()
	ok, err := c.insert(in)
	c.wmu.Unlock()
	if err != nil {
		return r, false, nil, err
	}
	if !ok {
		return r, false, nil, nil
	}
	if c.OnStored != nil {
		c.OnStored(Stored{ID: r.ID, Raw: data, Report: r, Result: res, Frames: frames, Signature: sig, Group: in.group, Release: extra.Release})
	}
	if c.opts.MaxBytes > 0 {
		c.maybePrune()
	}
	return r, true, nil, nil
}

// symbolize symbolizes r with the current symbols.
func (c *Collector) symbolize(r *report.Report) (*symbolize.Result, []signature.Frame) {
	c.smu.Lock()
	defer c.smu.Unlock()
	gen := c.generation()
	if c.sym == nil || gen != c.sgen {
		if c.sym != nil {
			c.sym.Close()
		}
		dirs := append([]string{filepath.Join(c.dir, SymbolsDir)}, c.opts.DebugDirs...)
		c.sym = symbolize.New(symbolize.Options{DebugDirs: dirs, Sysroot: c.opts.Sysroot, Debuginfod: c.opts.Debuginfod})
		c.sgen = gen
	}
	res := c.sym.Symbolize(r)
	return res, signature.Frames(res)
}

// generation identifies the symbol store's state: DIR/symbols/generation's
// modification time and size ("" when there is none).
func (c *Collector) generation() string {
	st, err := os.Stat(filepath.Join(c.dir, SymbolsDir, Generation))
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d.%d", st.ModTime().UnixNano(), st.Size())
}

// ingest is one report ready for its transaction.
type ingest struct {
	r                  *report.Report
	raw, symbolized    []byte
	received, seen     int64
	device, program    string
	release            string
	releaseJSON, attrs string
	attrMap            map[string]string
	sig                signature.Signature
	group              string
	missing            int
	lacking            string
}

func (c *Collector) ingest(r *report.Report, raw []byte, res *symbolize.Result, frames []signature.Frame, sig signature.Signature, x reportExtras, received int64) *ingest {
	js, _ := json.Marshal(res)
	in := &ingest{
		r: r, raw: raw, symbolized: c.enc.EncodeAll(js, nil),
		received: received,
		device:   r.DeviceID, program: programOf(r),
		release: x.Release.Label(), sig: sig,
		group:   GroupID(sig.Text, r.Signal.Number),
		attrMap: x.Attributes,
	}
	in.seen = in.received
	if r.TimeTrusted && r.Time > 0 {
		in.seen = r.Time
	}
	if in.device == "" {
		in.device = "unknown"
	}
	rj, _ := json.Marshal(x.Release)
	aj, _ := json.Marshal(x.Attributes)
	in.releaseJSON, in.attrs = string(rj), string(aj)
	for _, f := range frames {
		if f.Module != "" && f.Function == "" {
			in.missing++
		}
	}
	in.lacking = lacking(res)
	return in
}

// lacking lists the GNU build ids of the modules whose crashed-thread
// frames had no symbol, as " id1 id2 " (a LIKE '% id %' finds one).
func lacking(res *symbolize.Result) string {
	seen := map[string]bool{}
	var ids []string
	for _, t := range res.Threads {
		if !t.Crashed {
			continue
		}
		for _, f := range t.Frames {
			if len(f.Locations) > 0 || f.Module < 0 || f.Module >= len(res.Report.Modules) {
				continue
			}
			m := res.Report.Modules[f.Module]
			id := strings.ToLower(m.BuildID)
			if id == "" || m.BuildIDKind == "code" || seen[id] {
				continue
			}
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return ""
	}
	return " " + strings.Join(ids, " ") + " "
}

// programOf names a report's program: its executable, else its comm.
func programOf(r *report.Report) string {
	if r.Exe != "" {
		return r.Exe
	}
	if r.Comm != "" {
		return r.Comm
	}
	return "unknown"
}

// GroupID is the id of the group of a signature and signal: 12 hex digits
// of a hash of both, the same in every collector.
func GroupID(sig string, signal int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%d\x00%s", signal, sig)))
	return hex.EncodeToString(h[:6])
}

// insert stores one report and counts it in its group, in one
// transaction. It returns false when the report was already there (a
// concurrent Put, or another process).
func (c *Collector) insert(in *ingest) (added bool, err error) {
	err = c.inTx(func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRow(`SELECT (SELECT count(*) FROM reports WHERE id = ?1) + (SELECT count(*) FROM gone WHERE id = ?1)`, in.r.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if err := addToGroup(tx, in.group, in.sig, in.r.Signal.Number, in.r.ID, in.seen); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO reports (id, received, seen, device, program, arch, kernel, signal, release,
			group_id, signature, missing, raw, symbolized, size, release_json, attributes, lacking)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			in.r.ID, in.received, in.seen, in.device, in.program, in.r.Arch, in.r.Kernel, in.r.Signal.Number, in.release,
			in.group, in.sig.Text, in.missing, in.raw, in.symbolized, len(in.raw)+len(in.symbolized), in.releaseJSON, in.attrs, in.lacking)
		if err != nil {
			return err
		}
		if err := addFacets(tx, in.group, facetsOf(in), 1, in.seen, in.seen); err != nil {
			return err
		}
		added = true
		return nil
	})
	return added, err
}

// inTx runs fn in one transaction, committed when fn returns nil and
// rolled back otherwise. Callers that write hold wmu (one writer).
func (c *Collector) inTx(fn func(tx *sql.Tx) error) error {
	tx, err := c.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// addToGroup counts one report in its group, creating the group.
func addToGroup(tx *sql.Tx, id string, sig signature.Signature, signal int, sample string, seen int64) error {
	_, err := tx.Exec(`INSERT INTO groups (id, signature, signal, symbolized, count, first_seen, last_seen, sample)
		VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5, ?6)
		ON CONFLICT(id) DO UPDATE SET count = count + 1,
			first_seen = min(first_seen, ?5), last_seen = max(last_seen, ?5),
			sample = ?6, merged_into = NULL`,
		id, sig.Text, signal, boolInt(sig.Symbolized), seen, sample)
	return err
}

// facet is one (facet, value) of a report.
type facet struct{ name, value string }

func facetsOf(in *ingest) []facet {
	fs := []facet{
		{"device", in.device}, {"release", in.release}, {"program", in.program},
		{"kernel", orUnknown(in.r.Kernel)}, {"arch", orUnknown(in.r.Arch)},
		{"day", time.Unix(in.seen, 0).UTC().Format("2006-01-02")},
	}
	keys := make([]string, 0, len(in.attrMap))
	for k := range in.attrMap {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fs = append(fs, facet{"attr:" + k, in.attrMap[k]})
	}
	return fs
}

// addFacets adds n reports seen between first and last to a group's
// facets (n < 0 takes them away, leaving the seen times).
func addFacets(tx *sql.Tx, group string, fs []facet, n int, first, last int64) error {
	st, err := tx.Prepare(`INSERT INTO facets (group_id, facet, value, count, first_seen, last_seen)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6)
		ON CONFLICT(group_id, facet, value) DO UPDATE SET count = count + ?4,
			first_seen = min(first_seen, ?5), last_seen = max(last_seen, ?6)`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, f := range fs {
		if _, err := st.Exec(group, f.name, f.value, n, first, last); err != nil {
			return err
		}
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

var _ receive.Sink = (*Collector)(nil)

// Collect stores report files (.json.zst or .json, as unwound receive
// writes them) into the collector in dir, creating it, and returns the
// group each report is in, in order: what make demo calls with the report
// it received, before telling the user how to look at it (unwound crashes
// show GROUP --dir DIR, or unwound serve --dir DIR and its page).
func Collect(dir string, o Options, files ...string) ([]Group, error) {
	c, err := Open(dir, o)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []Group
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return out, err
		}
		r, _, invalid, err := c.Put(data, "")
		if invalid != nil {
			return out, fmt.Errorf("%s: %w", f, invalid)
		}
		if err != nil {
			return out, fmt.Errorf("%s: %w", f, err)
		}
		var group string
		if err := c.db.QueryRow(`SELECT group_id FROM reports WHERE id = ?`, r.ID).Scan(&group); err != nil {
			return out, fmt.Errorf("%s: %w", f, err)
		}
		g, err := c.Group(group)
		if err != nil {
			return out, err
		}
		out = append(out, g.Group)
	}
	return out, nil
}
