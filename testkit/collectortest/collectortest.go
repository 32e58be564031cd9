// Package collectortest reads what a collector stored, for the tests that
// run one (unwound serve, unwound receive --dir) and then check its
// database.
package collectortest

import (
	"testing"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/host/receive"
)

// List opens the collector in dir and lists its reports; the collector is
// closed when the test ends.
func List(t testing.TB, dir string) (*collector.Collector, []receive.Stored) {
	t.Helper()
	c, err := collector.Open(dir, collector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	list, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	return c, list
}
