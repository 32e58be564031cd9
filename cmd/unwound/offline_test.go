package main

// Reports of real crashes for the commands' tests (testkit/offline), stored
// as a board's queue entry.

import (
	"os"
	"testing"

	"github.com/unwound-dev/unwound/report"
)

// writeReport stores r at path, encoded as the handler queues it.
func writeReport(t *testing.T, r *report.Report, path string) {
	t.Helper()
	z, err := report.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, z, 0o644); err != nil {
		t.Fatal(err)
	}
}
