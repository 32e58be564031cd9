package webtest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/offline"
)

// A lab release is a build of the fixture programs (its own compiler,
// linker, build ids and addresses) and the crashes boards running it had.
type labRelease struct {
	variant   string
	release   *report.Release
	scenarios []string
	days      int // its reports are from this many days before now...
	span      int // ...over this many days
}

// The second release keeps every bug of the first and adds two: raise
// (SIGBUS in rs2) and throw (an uncaught C++ exception), new in 2.4.1.
var labReleases = []labRelease{
	{"O2-dynamic", &report.Release{ID: "debian", VersionID: "12", ImageID: "gateway", ImageVersion: "2.4.0"},
		[]string{"nullwrite", "abort", "nullfn", "memcpy", "recursion"}, 13, 8},
	{"clang-lld-default-dynamic", &report.Release{ID: "debian", VersionID: "12", ImageID: "gateway", ImageVersion: "2.4.1"},
		[]string{"nullwrite", "abort", "nullfn", "memcpy", "recursion", "raise", "throw"}, 5, 5},
}

// labFleet makes real reports: each fixture program crashed by the host
// kernel (x86_64) or qemu-user (aarch64), its core turned into a report by
// the handler with the stripped program, as on a board. Each crash is
// then sent by several boards on several days, with the release and the
// hw_rev attribute the report format carries. It returns the reports
// (zstd, as an uploader posts them) and the unstripped programs by
// build id, for the collector's symbols directory.
func labFleet(t *testing.T, now time.Time) (reports [][]byte, symbols map[string]string) {
	t.Helper()
	symbols = map[string]string{}
	n := 0
	for _, arch := range []string{"x86_64", "aarch64"} {
		dir := fixture.Build(t, arch)
		for _, rel := range labReleases {
			for si, s := range rel.scenarios {
				prog := "crash"
				if s == "throw" {
					prog = "crashxx"
				}
				b := fixture.Binary{Arch: arch, Variant: rel.variant, Prog: prog, Dir: dir}
				if _, err := os.Stat(b.Stripped()); err != nil {
					t.Skipf("%s: not built here", b.Stripped())
				}
				r := offline.Fixture(t, b, s, b.Sysroot())
				// The program's symbols, and the libraries' (their
				// .dynsym names abort, raise and memcpy), as a team
				// would upload them with unwound symbols add.
				for _, m := range r.Modules {
					if m.BuildID == "" || m.BuildIDKind == "code" || len(m.BuildID) < 3 {
						continue
					}
					if filepath.Base(m.Path) == prog {
						symbols[m.BuildID] = b.Unstripped()
					} else if _, err := os.Stat(filepath.Join(b.Sysroot(), m.Path)); err == nil {
						symbols[m.BuildID] = filepath.Join(b.Sysroot(), m.Path)
					}
				}
				// Bugs differ in how many boards they hit: the table's
				// order has something to show.
				boards := 1 + (len(rel.scenarios)-si+len(arch))%5
				for d := 0; d < boards; d++ {
					for k := 0; k <= d%3; k++ {
						n++
						cp := *r
						cp.ID = fmt.Sprintf("%x", sha256.Sum256([]byte(fmt.Sprint("lab report ", n))))[:32]
						cp.DeviceID = fmt.Sprintf("%s-gw-%02d", arch, d)
						day := rel.days - (n*7)%rel.span
						cp.Time, cp.TimeTrusted = now.Add(-time.Duration(day)*24*time.Hour-time.Duration(n%600)*time.Minute).Unix(), true
						cp.Release = rel.release
						cp.Device = &report.Device{Attributes: map[string]string{"hw_rev": fmt.Sprintf("rev%c", 'A'+d%3)}}
						js, err := json.Marshal(&cp)
						if err != nil {
							t.Fatal(err)
						}
						reports = append(reports, report.Compress(js))
					}
				}
			}
		}
	}
	return reports, symbols
}

// addSymbols lays the unstripped programs out as unwound symbols add
// does: DIR/symbols/.build-id/xx/rest.
func addSymbols(t *testing.T, dir string, symbols map[string]string) {
	t.Helper()
	for id, src := range symbols {
		dst := filepath.Join(dir, collector.SymbolsDir, ".build-id", id[:2], id[2:])
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
