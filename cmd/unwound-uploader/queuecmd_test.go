package main

import (
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestQueueCommands: `list`, `show` and `drop` on a real queue with the
// real binary: entries by sequence number, by report-id prefix and by
// name; a corrupt entry is quarantined and said so, never shown as a
// report; a typo among several IDs drops nothing.
func TestQueueCommands(t *testing.T) {
	q := testutil.Queue(t)
	want := testutil.Stage(t, q.Dir(), mrand.New(mrand.NewSource(5)), 1, 3, 6)
	var ids []string
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	// A fourth entry whose bytes are not a report.
	bad := filepath.Join(q.Dir(), "0000000004-0123abcd.json.zst")
	if err := os.WriteFile(bad, []byte("not zstd"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testutil.Config(t, q.Dir(), "")
	up, _ := binaries(t)
	run := func(args ...string) (string, error) {
		out, err := exec.Command(up, append([]string{"--config", cfg}, args...)...).CombinedOutput()
		return string(out), err
	}

	// The uploader's start-up recovery quarantines the corrupt entry.
	out, err := run("list")
	if err != nil {
		t.Fatalf("list: %v\n%s", err, out)
	}
	for _, id := range ids {
		if !strings.Contains(out, id[:16]) {
			t.Errorf("list does not show report %s:\n%s", id, out)
		}
	}
	if !strings.Contains(out, "3 report(s) queued") {
		t.Errorf("list count:\n%s", out)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("corrupt entry still queued (err %v)", err)
	}

	out, err = run("show", "2")
	if err != nil || !strings.Contains(out, "0000000002-0123abcd.json.zst") || !strings.Contains(out, "thread ") {
		t.Fatalf("show 2: %v\n%s", err, out)
	}
	out, err = run("show", "--json", ids[0][:10])
	if err != nil || !strings.Contains(out, `"id": "`+ids[0]+`"`) {
		t.Fatalf("show --json by id prefix: %v\n%s", err, out)
	}
	if out, err = run("show", "99"); err == nil {
		t.Fatalf("show of a missing entry succeeded:\n%s", out)
	}

	// A typo among the IDs: nothing dropped.
	if out, err = run("drop", "1", "nosuchthing"); err == nil {
		t.Fatalf("drop with a typo succeeded:\n%s", out)
	}
	if n := len(testutil.Entries(t, q.Dir())); n != 3 {
		t.Fatalf("%d entries after a refused drop, want 3", n)
	}
	// By sequence number and by name; the same entry twice counts once.
	out, err = run("drop", "1", "0000000003-0123abcd.json.zst", "1")
	if err != nil || strings.Count(out, "dropped ") != 2 {
		t.Fatalf("drop: %v\n%s", err, out)
	}
	left := testutil.Entries(t, q.Dir())
	if len(left) != 1 || left[0] != "0000000002-0123abcd.json.zst" {
		t.Fatalf("left %v, want one entry", left)
	}
}
