package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// The queue as a person on the board sees it: `list`, `show ID`, `drop
// ID...`. ID is an entry's file name, its sequence number, or a prefix
// (at least 8 hex digits) of the report id inside it.

// listQueue prints one line per entry, oldest first: sequence, size,
// crash time (when the board's clock was trusted), report id, signal and
// program. A corrupt entry is quarantined by the read and said so.
func listQueue(q *queue.Queue, w io.Writer) int {
	es, err := q.List()
	if err != nil {
		fmt.Fprintf(os.Stderr, "unwound-uploader: %v\n", err)
		return 1
	}
	fmt.Fprintf(w, "%-10s %7s  %-20s  %-16s  %s\n", "SEQ", "BYTES", "CRASHED (UTC)", "REPORT", "SIGNAL PROGRAM")
	for _, e := range es {
		when := "clock not set"
		if e.Time != 0 {
			when = time.Unix(e.Time, 0).UTC().Format("2006-01-02 15:04:05")
		}
		r, err := readReport(q, e.Name)
		if err != nil {
			fmt.Fprintf(w, "%-10d %7d  %-20s  %-16s  %v\n", e.Seq, e.Size, when, "?", err)
			continue
		}
		id := r.ID
		if len(id) > 16 {
			id = id[:16]
		}
		fmt.Fprintf(w, "%-10d %7d  %-20s  %-16s  %s %s\n", e.Seq, e.Size, when, id, r.Signal.Name, r.Exe)
	}
	fmt.Fprintf(w, "%d report(s) queued in %s\n", len(es), q.Dir())
	return 0
}

// readReport reads and decodes one entry (Read validates and quarantines).
func readReport(q *queue.Queue, name string) (*report.Report, error) {
	data, err := q.Read(name)
	if err != nil {
		return nil, err
	}
	return decode.Report(data)
}

// findEntry resolves an ID to one entry name.
func findEntry(q *queue.Queue, id string) (string, error) {
	es, err := q.List()
	if err != nil {
		return "", err
	}
	seq, seqErr := strconv.ParseUint(id, 10, 64)
	for _, e := range es {
		if e.Name == id || (seqErr == nil && e.Seq == seq) {
			return e.Name, nil
		}
	}
	if len(id) < 8 || strings.Trim(strings.ToLower(id), "0123456789abcdef") != "" {
		return "", fmt.Errorf("no queued report %q (give a name, a sequence number or 8+ hex digits of a report id)", id)
	}
	var found []string
	for _, e := range es {
		r, err := readReport(q, e.Name)
		if err == nil && strings.HasPrefix(r.ID, strings.ToLower(id)) {
			found = append(found, e.Name)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no queued report %q", id)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("report id %q is ambiguous: %s", id, strings.Join(found, ", "))
}

// showEntry prints one report: its summary and, with --json, the whole
// JSON as stored (PCs and modules only: nothing else is in a report).
func showEntry(q *queue.Queue, args []string, w io.Writer) int {
	asJSON := len(args) == 2 && args[0] == "--json"
	if asJSON {
		args = args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: unwound-uploader show [--json] ID")
		return 2
	}
	name, err := findEntry(q, args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "unwound-uploader: %v\n", err)
		return 1
	}
	r, err := readReport(q, name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "unwound-uploader: %s: %v\n", name, err)
		return 1
	}
	if asJSON {
		js, err := r.MarshalIndent()
		if err != nil {
			fmt.Fprintf(os.Stderr, "unwound-uploader: %v\n", err)
			return 1
		}
		fmt.Fprintf(w, "%s\n", js)
		return 0
	}
	fmt.Fprintf(w, "%s\n", name)
	io.WriteString(w, r.Summary())
	for _, th := range r.Threads {
		mark := ""
		if th.Crashed {
			mark = " (crashed)"
		}
		fmt.Fprintf(w, "thread %d %q%s: %d frame(s), %s", th.TID, th.Name, mark, len(th.Frames)+th.Elided, th.StopReason)
		fmt.Fprintln(w)
	}
	return 0
}

// dropEntries removes the named entries: reports a person decided never to
// upload. Every ID is resolved first, so a typo drops nothing.
func dropEntries(q *queue.Queue, args []string, w io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: unwound-uploader drop ID...")
		return 2
	}
	var names []string
	seen := map[string]bool{}
	for _, id := range args {
		name, err := findEntry(q, id)
		if err != nil {
			fmt.Fprintf(os.Stderr, "unwound-uploader: %v; nothing dropped\n", err)
			return 1
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	rc := 0
	for _, name := range names {
		if err := q.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "unwound-uploader: dropping %s: %v\n", name, err)
			rc = 1
			continue
		}
		fmt.Fprintf(w, "dropped %s\n", name)
	}
	return rc
}
