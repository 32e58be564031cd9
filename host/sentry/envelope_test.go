package sentry

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	dsn, err := ParseDSN("https://abc@o1.ingest.example.com/42")
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte("{\"event_id\":\"x\",\"message\":\"two\\nlines\"}")
	sent := time.Date(2026, 11, 26, 12, 0, 0, 5e8, time.UTC)
	b := NewEnvelope(dsn, "0123456789abcdef0123456789abcdef", payload, sent)
	env, err := ParseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	if env.Header["event_id"] != "0123456789abcdef0123456789abcdef" || env.Header["dsn"] != dsn.String() || env.Header["sent_at"] != "2026-11-26T12:00:00.5Z" {
		t.Errorf("envelope header %v", env.Header)
	}
	if len(env.Items) != 1 || env.Items[0].Type != "event" || env.Items[0].Header["length"] != float64(len(payload)) {
		t.Fatalf("items %+v", env.Items)
	}
	if got, _ := env.Event(); !bytes.Equal(got, payload) {
		t.Errorf("payload %q, want %q", got, payload)
	}
}

// Framings the envelope spec allows, and ones it does not.
func TestParseEnvelope(t *testing.T) {
	ok := []struct {
		name  string
		in    string
		items []string // type=payload
	}{
		{"length, trailing newline", "{}\n{\"type\":\"event\",\"length\":2}\n{}\n", []string{"event={}"}},
		{"length, no trailing newline", "{}\n{\"type\":\"event\",\"length\":2}\n{}", []string{"event={}"}},
		{"payload holding newlines", "{}\n{\"type\":\"attachment\",\"length\":5}\na\nb\nc\n", []string{"attachment=a\nb\nc"}},
		{"no length: to the newline", "{\"event_id\":\"9ec79c33ec9942ab8353589fcb2e04dc\"}\n{\"type\":\"session\"}\n{\"a\":1}\n{\"type\":\"event\"}\n{}\n", []string{"session={\"a\":1}", "event={}"}},
		{"no length: to the end", "{}\n{\"type\":\"event\"}\n{}", []string{"event={}"}},
		{"empty payload", "{}\n{\"type\":\"attachment\",\"length\":0}\n\n{\"type\":\"event\"}\n{}\n", []string{"attachment=", "event={}"}},
		{"no items", "{}\n", nil},
		{"no items, no newline", "{\"dsn\":\"https://k@h/1\"}", nil},
	}
	for _, c := range ok {
		env, err := ParseEnvelope([]byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, it := range env.Items {
			got = append(got, it.Type+"="+string(it.Payload))
		}
		if !equal(got, c.items) {
			t.Errorf("%s: items %q, want %q", c.name, got, c.items)
		}
	}
	bad := map[string]string{
		"empty":                    "",
		"header not an object":     "[]\n",
		"header not JSON":          "{\n",
		"two values on a line":     "{} {}\n",
		"item without a type":      "{}\n{\"length\":2}\n{}\n",
		"length beyond the end":    "{}\n{\"type\":\"event\",\"length\":10}\n{}\n",
		"negative length":          "{}\n{\"type\":\"event\",\"length\":-1}\n{}\n",
		"fractional length":        "{}\n{\"type\":\"event\",\"length\":1.5}\n{}\n",
		"length as a string":       "{}\n{\"type\":\"event\",\"length\":\"2\"}\n{}\n",
		"payload longer than said": "{}\n{\"type\":\"event\",\"length\":1}\n{}\n",
		"empty item header":        "{}\n\n{\"type\":\"event\"}\n{}\n",
	}
	for name, in := range bad {
		if _, err := ParseEnvelope([]byte(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func FuzzParseEnvelope(f *testing.F) {
	dsn, _ := ParseDSN("https://abc@example.com/1")
	f.Add(NewEnvelope(dsn, "0123456789abcdef0123456789abcdef", []byte(`{"a":"b\nc"}`), time.Unix(0, 0)))
	f.Add([]byte("{}\n{\"type\":\"event\"}\n{}\n"))
	f.Add([]byte("{}\n{\"type\":\"attachment\",\"length\":0}\n\n"))
	f.Add([]byte("{}\n{\"type\":\"event\",\"length\":1e300}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := ParseEnvelope(b)
		if err != nil {
			return
		}
		for _, it := range env.Items {
			if it.Type == "" {
				t.Fatal("item without a type")
			}
			if n, ok := it.Header["length"].(float64); ok && int(n) != len(it.Payload) {
				t.Fatalf("length %v, payload of %d bytes", n, len(it.Payload))
			}
		}
		// What parses re-frames to the same items.
		var again bytes.Buffer
		h, _ := json.Marshal(env.Header)
		again.Write(h)
		for _, it := range env.Items {
			ih, _ := json.Marshal(map[string]any{"type": it.Type, "length": len(it.Payload)})
			again.WriteByte('\n')
			again.Write(ih)
			again.WriteByte('\n')
			again.Write(it.Payload)
		}
		env2, err := ParseEnvelope(again.Bytes())
		if err != nil {
			t.Fatalf("re-framed envelope: %v", err)
		}
		if len(env2.Items) != len(env.Items) {
			t.Fatalf("%d items, re-framed %d", len(env.Items), len(env2.Items))
		}
		for i := range env.Items {
			if !bytes.Equal(env.Items[i].Payload, env2.Items[i].Payload) {
				t.Fatalf("item %d: payload changed", i)
			}
		}
	})
}
