package sentry

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/host/sentry/sentrytest"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// validatePayload checks an event's JSON against Sentry's event schema.
func validatePayload(t testing.TB, payload []byte) {
	t.Helper()
	if err := sentrytest.Validate(payload); err != nil {
		t.Fatal(err)
	}
}

// validate checks an event against Sentry's event schema.
func validate(t testing.TB, ev *Event) []byte {
	t.Helper()
	p, err := ev.Payload()
	if err != nil {
		t.Fatal(err)
	}
	validatePayload(t, p)
	return p
}

// realReports are the reports of testdata/mkreports.sh.
var realReports = []string{"nullwrite", "threads", "sighandler", "recursion"}

func loadReport(t testing.TB, name string) (*report.Report, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".json.zst"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := decode.Report(raw)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r, raw
}

// TestSchemaRejects proves the validation has teeth: events Sentry would
// refuse fail it.
func TestSchemaRejects(t *testing.T) {
	r, _ := loadReport(t, "nullwrite")
	ev, err := NewEvent(Input{Report: r})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := ev.Payload()
	for name, edit := range map[string]func(m map[string]any){
		"frame with an unknown field": func(m map[string]any) {
			th := m["threads"].(map[string]any)["values"].([]any)[0].(map[string]any)
			fr := th["stacktrace"].(map[string]any)["frames"].([]any)[0].(map[string]any)
			fr["trust"] = "high"
		},
		"level not in the enum":   func(m map[string]any) { m["level"] = "crash" },
		"fingerprint not strings": func(m map[string]any) { m["fingerprint"] = []any{1} },
		"signal number as a string": func(m map[string]any) {
			ex := m["exception"].(map[string]any)["values"].([]any)[0].(map[string]any)
			ex["mechanism"].(map[string]any)["meta"].(map[string]any)["signal"].(map[string]any)["number"] = "11"
		},
	} {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		if sentrytest.Validate(b) == nil {
			t.Errorf("%s: validates, want an error", name)
		}
	}
}
