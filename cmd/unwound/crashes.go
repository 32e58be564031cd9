package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/host/symbolize"
)

func init() { fleetCmds["crashes"] = func(args []string) error { return crashesCmd(args, os.Stdout) } }

// crashes reads a collector, in the style of coredumpctl: list the
// groups, show one group or report, list a group's reports, symbolize
// again. It reads the collector's directory directly (--dir) or asks a
// running collector over HTTP (--url).
func crashesCmd(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New("crashes: want list, show, reports or resymbolize (unwound help)")
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("crashes "+sub, flag.ContinueOnError)
	dir := fs.String("dir", "", "the collector's `directory` (as unwound serve --dir)")
	url := fs.String("url", "", "a running collector's base `URL` (http://host:8080)")
	token := fs.String("token", "", "bearer `token` for --url (default $UNWOUND_TOKEN)")
	asJSON := fs.Bool("json", false, "print JSON")
	var cf collectorFlags
	var f collector.Filter
	var since, signal string
	limit := 0
	switch sub {
	case "list":
		fs.StringVar(&since, "since", "", "groups seen since `when` (RFC 3339, YYYY-MM-DD, or a duration: 24h, 7d)")
		fs.StringVar(&f.Release, "release", "", "groups seen in this `release` (as listed: \"myimage 2.4.1\", the version alone, or unknown)")
		fs.StringVar(&f.Program, "program", "", "groups of this `program` (path or base name)")
		fs.StringVar(&f.Device, "device", "", "groups seen on this `device` id")
		fs.StringVar(&signal, "signal", "", "groups of this `signal` (SIGSEGV, 11)")
		fs.StringVar(&f.Order, "order", "boards", "sort by boards, count, last, first or signature")
		fs.IntVar(&f.Limit, "limit", 0, "at most `N` groups")
	case "reports":
		fs.StringVar(&since, "since", "", "reports received since `when`")
		fs.IntVar(&limit, "limit", 0, "at most `N` reports, newest first")
	case "show":
	case "resymbolize":
		cf.register(fs, false)
	default:
		return fmt.Errorf("crashes: unknown subcommand %q: want list, show, reports or resymbolize", sub)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	rd, closeFn, err := openReader(*dir, *url, *token, &cf)
	if err != nil {
		return fmt.Errorf("crashes %s: %w", sub, err)
	}
	defer closeFn()
	switch sub {
	case "list":
		if len(pos) > 0 {
			return fmt.Errorf("crashes list: unexpected %q", pos[0])
		}
		if f.Since, err = collector.ParseSince(since, time.Now()); err != nil {
			return err
		}
		if signal != "" {
			if f.Signal, err = collector.ParseSignal(signal); err != nil {
				return err
			}
		}
		gs, err := rd.Groups(f)
		return emit(w, *asJSON, gs, err, writeGroups)
	case "show":
		if len(pos) != 1 {
			return errors.New("crashes show: name one GROUP or REPORT")
		}
		g, r, err := resolve(rd, pos[0])
		return emit(w, *asJSON, shown{g, r}, err, writeShow)
	case "reports":
		if len(pos) != 1 {
			return errors.New("crashes reports: name one GROUP")
		}
		q := collector.ReportQuery{Group: pos[0], Limit: limit}
		if q.Since, err = collector.ParseSince(since, time.Now()); err != nil {
			return err
		}
		reps, err := rd.Reports(q)
		return emit(w, *asJSON, reps, err, writeReports)
	case "resymbolize":
		res, err := rd.Resymbolize()
		return emit(w, *asJSON, res, err, writeResymbolized)
	}
	return nil
}

// emit prints what a subcommand got: indented JSON with --json, else
// text.
func emit[T any](w io.Writer, asJSON bool, v T, err error, text func(io.Writer, T) error) error {
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return text(w, v)
}

// shown is what crashes show found: a group, and a report of it.
type shown struct {
	Group  *collector.GroupDetail  `json:"group"`
	Report *collector.ReportDetail `json:"report,omitempty"`
}

func writeResymbolized(w io.Writer, res collector.ResymbolizeResult) error {
	fmt.Fprintf(w, "%d reports symbolized again: %d with more symbols, %d in another group; %d groups merged\n",
		res.Reports, res.Improved, res.Regrouped, len(res.Merged))
	for _, m := range res.Merged {
		fmt.Fprintf(w, "  %s merged into %s\n", m.From, m.To)
	}
	return nil
}

// parseInterleaved parses flags anywhere among the arguments (show GROUP
// --json), returning the others.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// openReader opens the collector directory, or a client of the URL.
func openReader(dir, url, token string, cf *collectorFlags) (collector.Reader, func(), error) {
	switch {
	case dir != "" && url != "":
		return nil, nil, errors.New("--dir or --url, not both")
	case url != "":
		if token == "" {
			token = os.Getenv("UNWOUND_TOKEN")
		}
		return &collector.Client{URL: url, Token: token}, func() {}, nil
	case dir != "":
		if _, err := os.Stat(dir + "/" + collector.DBName); err != nil {
			return nil, nil, fmt.Errorf("%s: no collector database there (unwound serve --dir %s makes one)", dir, dir)
		}
		c, err := cf.open(dir, func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "unwound crashes: "+format+"\n", args...)
		})
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	return nil, nil, errors.New("--dir DIR or --url URL: which collector?")
}

// resolve finds a group (12 hex digits) or a report (32, or a unique
// prefix of 8 or more): a report's group comes with it.
func resolve(rd collector.Reader, id string) (*collector.GroupDetail, *collector.ReportDetail, error) {
	id = strings.ToLower(id)
	if len(id) == 12 {
		g, err := rd.Group(id)
		if err == nil {
			if g.Sample == "" {
				return g, nil, nil
			}
			r, err := rd.Report(g.Sample)
			return g, r, err
		}
		if !errors.Is(err, collector.ErrNotFound) {
			return nil, nil, err
		}
	}
	r, err := rd.Report(id)
	if err != nil {
		if errors.Is(err, collector.ErrNotFound) {
			return nil, nil, fmt.Errorf("%s: no such group or report", id)
		}
		return nil, nil, err
	}
	g, err := rd.Group(r.Group)
	if err != nil {
		return nil, nil, err
	}
	return g, r, nil
}

const stamp = "2006-01-02 15:04"

// writeGroups prints one line per group, the columns a person scans
// first: how many boards, how often, when last, what.
func writeGroups(w io.Writer, gs []collector.Group) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tBOARDS\tCOUNT\tLAST SEEN\tSIGNAL\tFIRST RELEASE\tPROGRAM\tSIGNATURE")
	for _, g := range gs {
		rel := g.FirstRelease
		if g.New {
			rel += " (new)"
		}
		prog := "-"
		if len(g.Programs) > 0 {
			prog = path.Base(g.Programs[0])
			if len(g.Programs) > 1 {
				prog += fmt.Sprintf(" +%d", len(g.Programs)-1)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", g.ID, g.Boards, g.Count, g.LastSeen.Local().Format(stamp), g.SignalName, rel, prog, g.Signature)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(gs) == 0 {
		fmt.Fprintln(w, "(no crashes)")
	}
	return nil
}

func writeReports(w io.Writer, reps []collector.ReportInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPORT\tTIME\tDEVICE\tRELEASE\tARCH\tSIGNAL\tPROGRAM")
	for _, r := range reps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Seen.Local().Format(stamp), r.Device, r.Release, r.Arch, r.SignalName, r.Program)
	}
	return tw.Flush()
}

// writeShow prints a group's numbers and a report's symbolized trace (the
// group's sample unless one report was asked for), as unwound symbolize
// prints it.
func writeShow(w io.Writer, s shown) error {
	g, r := s.Group, s.Report
	fmt.Fprintf(w, "group %s: %s (%s)\n", g.ID, g.Signature, g.SignalName)
	fmt.Fprintf(w, "  %d reports from %d boards, first seen %s, last seen %s", g.Count, g.Boards, g.FirstSeen.Local().Format(stamp), g.LastSeen.Local().Format(stamp))
	if g.Kept != g.Count {
		fmt.Fprintf(w, " (%d kept)", g.Kept)
	}
	fmt.Fprintln(w)
	if !g.Symbolized {
		fmt.Fprintln(w, "  signature from frames without symbols: it changes when they arrive (unwound crashes resymbolize)")
	}
	for _, rel := range g.Releases {
		mark := ""
		if g.New && rel.Value == g.FirstRelease {
			mark = "  new in this release"
		}
		fmt.Fprintf(w, "  release %-20s %5d reports, %s .. %s%s\n", rel.Value, rel.Count, rel.FirstSeen.Local().Format(stamp), rel.LastSeen.Local().Format(stamp), mark)
	}
	for _, p := range g.Programs {
		fmt.Fprintf(w, "  program %s\n", p)
	}
	if len(g.MergedFrom) > 0 {
		fmt.Fprintf(w, "  merged from %s\n", strings.Join(g.MergedFrom, ", "))
	}
	if r == nil {
		fmt.Fprintln(w, "\n(every report of this group was pruned)")
		return nil
	}
	fmt.Fprintf(w, "\nreport %s from device %s, release %s, received %s\n", r.ID, r.Device, r.Release, r.Received.Local().Format(stamp))
	if r.Result == nil {
		return errors.New("the report has no symbolized trace")
	}
	fmt.Fprintln(w)
	return symbolize.WriteText(w, r.Result)
}
