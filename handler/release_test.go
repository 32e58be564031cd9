package handler

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/internal/regular"
	"github.com/unwound-dev/unwound/report"
)

// TestReportReleaseAndAttributes: the report carries os-release's fields,
// read through the usual /etc/os-release symlink, and the config's
// device.attributes; /usr/lib/os-release is the fallback.
func TestReportReleaseAndAttributes(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "usr-lib-os-release")
	os.WriteFile(lib, []byte("ID=poky\nVERSION_ID=5.0\nIMAGE_ID=gw\nIMAGE_VERSION=\"2.4.1\"\nBUILD_ID=20261120\n"), 0o644)
	etc := filepath.Join(dir, "etc-os-release")
	if err := os.Symlink("usr-lib-os-release", etc); err != nil {
		t.Fatal(err)
	}
	want := report.Release{ID: "poky", VersionID: "5.0", ImageID: "gw", ImageVersion: "2.4.1", BuildID: "20261120"}
	core := stackCore().file(t, dir)
	release := func(paths ...string) *report.Release {
		saved := osReleasePaths
		osReleasePaths = paths
		defer func() { osReleasePaths = saved }()
		return offlineReport(t, OfflineOptions{CoreFile: core, Sysroot: t.TempDir()}).Release
	}
	for _, paths := range [][]string{{etc, lib}, {filepath.Join(dir, "missing"), lib}} {
		if got := release(paths...); got == nil || *got != want {
			t.Errorf("%v: %+v", paths, got)
		}
	}
	if got := release(filepath.Join(dir, "missing")); got != nil {
		t.Errorf("no file: %+v", got)
	}

	saved := osReleasePaths
	osReleasePaths = []string{etc}
	defer func() { osReleasePaths = saved }()
	cfg, err := config.Parse("u.toml", []byte("[device]\nattributes = { hw_rev = \"B2\", channel = \"beta\" }\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := offlineReport(t, OfflineOptions{CoreFile: core, Config: cfg, Sysroot: t.TempDir()})
	if r.Release == nil || *r.Release != want {
		t.Errorf("release %+v", r.Release)
	}
	if r.Device == nil || !reflect.DeepEqual(r.Device.Attributes, map[string]string{"hw_rev": "B2", "channel": "beta"}) {
		t.Errorf("device %+v", r.Device)
	}
	if r = offlineReport(t, OfflineOptions{CoreFile: core, Sysroot: t.TempDir()}); r.Device != nil {
		t.Errorf("no attributes configured: device %+v", r.Device)
	}
}

// BenchmarkOSRelease: what reading the release costs a crash (one
// bounded read of the host's /etc/os-release, through its symlink, and
// the parse), against reading the boot id, which every report already
// does, in the same run.
func BenchmarkOSRelease(b *testing.B) {
	var rel, boot time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for _, p := range osReleasePaths {
			if data, err := regular.ReadFile(p, 8<<10); err == nil {
				if report.ParseOSRelease(data) == nil {
					b.Fatal("no release in", p)
				}
				break
			}
		}
		rel += time.Since(start)
		start = time.Now()
		if readTrim("/proc/sys/kernel/random/boot_id") == "" {
			b.Fatal("no boot id")
		}
		boot += time.Since(start)
	}
	b.ReportMetric(float64(rel.Nanoseconds())/float64(b.N), "ns/release")
	b.ReportMetric(float64(boot.Nanoseconds())/float64(b.N), "ns/boot_id")
	b.ReportMetric(float64(rel)/float64(boot), "release/boot_id")
}
