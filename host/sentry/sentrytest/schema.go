// Package sentrytest validates events against Sentry's published event
// schema, for the tests of every package that makes Sentry events. The
// schema is read from host/sentry/testdata, where its origin is noted.
package sentrytest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The schema's top level is lenient where Relay's types are open (a
// debug image or a context of an unknown type is any object), so the
// images and the os and device contexts are also checked against the
// definitions of their own types.
var (
	schemaOnce sync.Once
	schemas    map[string]*jsonschema.Schema
	schemaErr  error
)

func compileSchemas() {
	const url = "file:///event.schema.json"
	_, here, _, _ := runtime.Caller(0)
	f, err := os.Open(filepath.Join(filepath.Dir(here), "..", "testdata", "event.schema.json"))
	if err != nil {
		schemaErr = err
		return
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		schemaErr = err
		return
	}
	c := jsonschema.NewCompiler()
	c.RegisterFormat(&jsonschema.Format{Name: "uuid", Validate: relayUUID})
	if err := c.AddResource(url, doc); err != nil {
		schemaErr = err
		return
	}
	schemas = map[string]*jsonschema.Schema{}
	for name, ref := range map[string]string{
		"event":  url,
		"image":  url + "#/definitions/NativeDebugImage",
		"os":     url + "#/definitions/OsContext",
		"device": url + "#/definitions/DeviceContext",
	} {
		s, err := c.Compile(ref)
		if err != nil {
			schemaErr = err
			return
		}
		schemas[name] = s
	}
}

// relayUUID is the schema's "uuid" format as Relay reads it. The schema
// is generated from Relay's Rust types, where "uuid" is the uuid crate's
// Uuid: it parses the simple form (32 hex digits, what Sentry's docs
// require of event_id and what Relay itself writes), the hyphenated one,
// and braced and URN forms. The validator's own "uuid" is RFC 4122's
// hyphenated text only, which would refuse what Relay accepts and writes.
func relayUUID(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	s = strings.TrimPrefix(s, "urn:uuid:")
	if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
		s = s[1 : len(s)-1]
	}
	if len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' {
		s = s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	}
	if len(s) != 32 {
		return fmt.Errorf("%q: not a UUID (32 hex digits, or hyphenated)", v)
	}
	if _, err := hex.DecodeString(s); err != nil {
		return fmt.Errorf("%q: not a UUID: %v", v, err)
	}
	return nil
}

// short keeps failure messages readable.
func short(b []byte) string {
	if len(b) > 1500 {
		return string(b[:1500]) + "…"
	}
	return string(b)
}

func checkAgainst(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if err := schemas[name].Validate(inst); err != nil {
		return fmt.Errorf("%s does not validate against Sentry's schema: %v\n%s", name, err, short(b))
	}
	return nil
}

// Validate checks an event's JSON payload against Sentry's event schema
// (Relay's event.schema.json, host/sentry/testdata): the event as a
// whole, and its debug images and its os and device contexts against
// the definitions of their own types.
func Validate(payload []byte) error {
	schemaOnce.Do(compileSchemas)
	if schemaErr != nil {
		return schemaErr
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return err
	}
	if err := schemas["event"].Validate(inst); err != nil {
		return fmt.Errorf("event does not validate against Sentry's schema: %v\n%s", err, short(payload))
	}
	var ev struct {
		DebugMeta struct {
			Images []map[string]any `json:"images"`
		} `json:"debug_meta"`
		Contexts map[string]any `json:"contexts"`
	}
	if err := json.Unmarshal(payload, &ev); err != nil {
		return err
	}
	for _, img := range ev.DebugMeta.Images {
		if img["type"] != "elf" {
			return fmt.Errorf("image of type %v, want elf", img["type"])
		}
		delete(img, "type") // the tag of Relay's enum, outside the variant's definition
		if err := checkAgainst("image", img); err != nil {
			return err
		}
	}
	for _, k := range []string{"os", "device"} {
		if c, ok := ev.Contexts[k]; ok {
			if err := checkAgainst(k, c); err != nil {
				return err
			}
		}
	}
	return nil
}
