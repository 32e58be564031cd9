package web

import (
	"testing"
	"time"

	"github.com/unwound-dev/unwound/host/collector"
)

// The chart draws the latest chartDays days, one bar a day, the highest
// bar full height and the empty days flat.
func TestChartDays(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var days []collector.Facet
	for i := 0; i < 100; i += 3 {
		days = append(days, collector.Facet{Value: start.AddDate(0, 0, i).Format("2006-01-02"), Count: 1 + i%7})
	}
	c := newChart(days)
	if len(c.Bars) != chartDays {
		t.Fatalf("%d bars, want %d", len(c.Bars), chartDays)
	}
	last := start.AddDate(0, 0, 99).Format("2006-01-02")
	if c.To != last || c.Bars[len(c.Bars)-1].Day != last {
		t.Errorf("ends %s, want %s", c.To, last)
	}
	for _, b := range c.Bars {
		if b.Count == 0 && b.H != 0 || b.Count == c.Max && b.H != c.Base-c.Top || b.Y+b.H != c.Base {
			t.Errorf("day %s: count %d, bar y %d height %d (max %d)", b.Day, b.Count, b.Y, b.H, c.Max)
		}
		if b.X+b.W > c.Width {
			t.Errorf("day %s: bar at %d+%d past the chart's width %d", b.Day, b.X, b.W, c.Width)
		}
	}
	if newChart(nil) != nil || newChart([]collector.Facet{{Value: "not a day"}}) != nil {
		t.Error("a chart without days")
	}
}
