package guest

import (
	"bytes"
	"strings"
	"testing"
)

func TestShipRoundTrip(t *testing.T) {
	var b bytes.Buffer
	WriteFile(&b, "cores/core.1", []byte("\x7fELF\n\x00data"))
	WriteFile(&b, "empty", nil)
	files, err := ReadFiles(&b)
	if err != nil || string(files["cores/core.1"]) != "\x7fELF\n\x00data" || len(files) != 2 {
		t.Fatalf("%v %q", err, files)
	}
}

func TestShipDetectsDamage(t *testing.T) {
	var b bytes.Buffer
	WriteFile(&b, "f", []byte("hello world"))
	s := b.String()
	for _, bad := range []string{strings.Replace(s, "hello", "jello", 1), s[:len(s)-4], "garbage\n"} {
		if _, err := ReadFiles(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestFacts(t *testing.T) {
	console := "[    1.2] random: crng init done\r\nHL-BUDGET mode=live rss=12\r\n" +
		"[    1.3] unwound-handler: stored HL-WAIT n=1\nQL-STORED x\nHL-\n"
	got := Facts(console, "HL-")
	want := []string{"BUDGET mode=live rss=12", "WAIT n=1", ""}
	if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
		t.Errorf("Facts = %q, want %q", got, want)
	}
	if got := Facts(console, "XL-"); got != nil {
		t.Errorf("Facts of an absent prefix = %q", got)
	}
}

func FuzzReadFiles(f *testing.F) {
	var b bytes.Buffer
	WriteFile(&b, "a", []byte("x"))
	f.Add(b.Bytes())
	f.Add([]byte("UNWOUND-FILE a 99999999999 00\n"))
	f.Add([]byte("UNWOUND-FILE a 999999999 00\nshort"))
	f.Fuzz(func(t *testing.T, p []byte) { ReadFiles(bytes.NewReader(p)) })
}
