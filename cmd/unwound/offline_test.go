package main

// Reports of real crashes for the commands' tests: a core unwound offline
// as `unwound-handler --core` does, stored as a board's queue entry.

import (
	"io"
	"os"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/report"
)

// offlineReport unwinds core with the default configuration; exe names
// the program where the core does not (a qemu-user core's), else "".
func offlineReport(t *testing.T, core, sysroot, exe string) *report.Report {
	t.Helper()
	r, err := handler.Offline(handler.OfflineOptions{CoreFile: core, Sysroot: sysroot, Exe: exe, Config: config.Default(), Log: handler.NewLogger(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

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
