// Package testutil makes reports and queues for the uploader's tests.
package testutil

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// Report returns an encoded valid report with about frames random PCs (the
// compressed size grows with frames: ~5 bytes each). comm names it.
func Report(rng *rand.Rand, comm string, frames int) (id string, data []byte) {
	r := &report.Report{
		Version: report.Version, ID: fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()),
		Arch: "x86_64", PID: 42, TID: 42, Comm: comm, Exe: "/usr/bin/" + comm,
		Signal:  report.Signal{Number: 11, Name: "SIGSEGV"},
		Modules: []report.Module{{Path: "/usr/bin/" + comm, Start: 0x400000, End: 0x500000}},
		Handler: report.Handler{Version: "test", Mode: "live"},
	}
	for len(r.Threads)*64 < frames {
		t := report.Thread{TID: 42 + len(r.Threads), Crashed: len(r.Threads) == 0, StopReason: "end"}
		for i := 0; i < 64 && len(r.Threads)*64+i < frames; i++ {
			t.Frames = append(t.Frames, report.Frame{PC: report.Hex(0x400000 + rng.Intn(0x100000)), Method: "cfi", Module: 0})
		}
		r.Threads = append(r.Threads, t)
	}
	b, err := report.Encode(r)
	if err != nil {
		panic(err)
	}
	return r.ID, b
}

// Queue opens a queue in a temp directory.
func Queue(t testing.TB) *queue.Queue {
	q, err := queue.Open(t.TempDir(), queue.Options{Check: decode.Entry, AllowVolatile: true})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Fill queues n reports of about frames frames each and returns their ids
// and bytes by id.
func Fill(t testing.TB, q *queue.Queue, rng *rand.Rand, n, frames int) map[string][]byte {
	out := map[string][]byte{}
	for i := 0; i < n; i++ {
		id, b := Report(rng, fmt.Sprintf("prog%d", i), frames)
		if _, err := q.Put(b, "0123abcd"); err != nil {
			t.Fatal(err)
		}
		out[id] = b
	}
	return out
}

// Stage writes n reports of about frames frames each straight into the
// queue directory as entries numbered after first (no fsync: for bulk
// tests, where Put's two fsyncs a report would dominate), and returns
// their ids and bytes by id. The entries are queued in the order written.
func Stage(t testing.TB, dir string, rng *rand.Rand, first, n, frames int) map[string][]byte {
	out := map[string][]byte{}
	for i := 0; i < n; i++ {
		id, b := Report(rng, fmt.Sprintf("prog%d", i), frames)
		name := fmt.Sprintf("%010d-0123abcd%s", first+i, report.Suffix)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		out[id] = b
	}
	return out
}

// Entries lists the queue's entry names.
func Entries(t testing.TB, dir string) []string {
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if strings.HasSuffix(de.Name(), report.Suffix) && !strings.HasPrefix(de.Name(), ".") {
			names = append(names, de.Name())
		}
	}
	return names
}

// Received checks that dir holds exactly want, as <id>.json.zst.
func Received(t testing.TB, dir string, want map[string][]byte) {
	t.Helper()
	got := Entries(t, dir)
	if len(got) != len(want) {
		t.Fatalf("%s holds %d reports, want %d: %v", dir, len(got), len(want), got)
	}
	for id, b := range want {
		g, err := os.ReadFile(filepath.Join(dir, id+report.Suffix))
		if err != nil {
			t.Fatal(err)
		}
		if string(g) != string(b) {
			t.Fatalf("report %s differs", id)
		}
	}
}
