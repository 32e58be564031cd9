// Package offline runs the handler's offline mode on a core for the host's
// tests, which need a real report of a real crash to symbolize, store or
// show: the default configuration, the handler's log discarded.
package offline

import (
	"io"
	"testing"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// Report is the handler's report of core, with the libraries read under
// sysroot; exe names the program when the core cannot ("" when it can).
func Report(t testing.TB, core, sysroot, exe string) *report.Report {
	t.Helper()
	r, err := handler.Offline(handler.OfflineOptions{CoreFile: core, Sysroot: sysroot, Exe: exe, Config: config.Default(), Log: handler.NewLogger(io.Discard)})
	if err != nil {
		t.Fatalf("%s: %v", core, err)
	}
	return r
}

// Fixture is the report of one fixture crash, from the core this host makes
// of it (fixture.Core). A qemu-user core has no NT_FILE note to name the
// program, so the stripped program is named for it.
func Fixture(t testing.TB, b fixture.Binary, scenario, sysroot string) *report.Report {
	t.Helper()
	core, kernel := fixture.Core(t, b, scenario)
	exe := ""
	if !kernel {
		exe = b.Stripped()
	}
	return Report(t, core, sysroot, exe)
}
