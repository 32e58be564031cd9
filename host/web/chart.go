package web

import (
	"fmt"
	"time"

	"github.com/unwound-dev/unwound/host/collector"
)

// chartDays is the most days the chart draws: the latest ones.
const chartDays = 60

// bar is one day of the chart.
type bar struct {
	Day          string // YYYY-MM-DD
	Count        int
	X, Y, W, H   int
	LabelX       int
	Label        string // an axis label under this bar, or ""
	TitleCrashes string
}

// chart is the crashes-per-day chart, laid out on the server: the page
// draws it as inline SVG with no script and no image request.
type chart struct {
	Width, Height int
	Top, Base     int // the plot's top and baseline y
	Max           int
	Bars          []bar
	Total         int
	From, To      string
}

// newChart lays out days (YYYY-MM-DD, oldest first, as GroupDetail.Days)
// as one bar per calendar day, days without crashes included, so a gap in
// the bars is a gap in time.
func newChart(days []collector.Facet) *chart {
	if len(days) == 0 {
		return nil
	}
	counts := map[string]int{}
	var first, last time.Time
	for _, d := range days {
		t, err := time.Parse("2006-01-02", d.Value)
		if err != nil {
			continue
		}
		counts[d.Value] += d.Count
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if first.IsZero() {
		return nil
	}
	if n := int(last.Sub(first).Hours()/24) + 1; n > chartDays {
		first = last.AddDate(0, 0, -(chartDays - 1))
	}
	c := &chart{Width: 640, Height: 150, Top: 14, Base: 120}
	var all []bar
	for t := first; !t.After(last); t = t.AddDate(0, 0, 1) {
		d := t.Format("2006-01-02")
		all = append(all, bar{Day: d, Count: counts[d]})
		c.Total += counts[d]
		if counts[d] > c.Max {
			c.Max = counts[d]
		}
	}
	c.From, c.To = all[0].Day, all[len(all)-1].Day
	slot := (c.Width - 40) / len(all)
	if slot > 60 {
		slot = 60
	}
	w := slot * 3 / 4
	if w < 2 {
		w = 2
	}
	every := 1 + len(all)/8 // about eight axis labels
	for i := range all {
		b := &all[i]
		b.W = w
		b.X = 30 + i*slot + (slot-w)/2
		if c.Max > 0 {
			b.H = b.Count * (c.Base - c.Top) / c.Max
		}
		if b.Count > 0 && b.H < 1 {
			b.H = 1
		}
		b.Y = c.Base - b.H
		b.LabelX = b.X + w/2
		if i%every == 0 {
			b.Label = b.Day[5:] // MM-DD
		}
		b.TitleCrashes = fmt.Sprintf("%s: %d %s", b.Day, b.Count, plural(b.Count, "crash", "crashes"))
	}
	c.Bars = all
	return c
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
