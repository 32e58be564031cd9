package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/report/jsonlite"
)

func sample() *Report {
	fa := Hex(0)
	return &Report{
		Version: Version, ID: NewID(), Time: 1790000000, TimeTrusted: true,
		Arch: "aarch64", PID: 42, TID: 43, Comm: "crash", Exe: "/usr/bin/crash",
		Signal: Signal{Number: 11, Name: "SIGSEGV", Code: 1, CodeName: "SEGV_MAPERR", FaultAddr: &fa},
		Modules: []Module{{Path: "/usr/bin/crash", BuildID: "ab12", BuildIDKind: "gnu",
			Start: 0x400000, End: 0x401000, RuntimeOffset: 0x400000}},
		Threads: []Thread{{TID: 43, Crashed: true, StopReason: "end_of_stack",
			Frames: []Frame{{PC: 0x400123, Method: "context", Exact: true}, {PC: 0x400456, Method: "cfi", Module: 0}}}},
		Handler: Handler{Version: "test", Mode: "live"},
	}
}

func TestAddressesAreHexStrings(t *testing.T) {
	js, _ := json.Marshal(sample())
	for _, want := range []string{`"pc":"0x400123"`, `"start":"0x400000"`, `"fault_addr":"0x0"`} {
		if !bytes.Contains(js, []byte(want)) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
}

func TestNewIDIsUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewID()
		if len(id) != 32 || seen[id] {
			t.Fatalf("id %q (len %d, seen %v)", id, len(id), seen[id])
		}
		seen[id] = true
	}
}

func TestSignalNames(t *testing.T) {
	if SignalName(11) != "SIGSEGV" || CodeName(11, 1) != "SEGV_MAPERR" || CodeName(6, -6) != "SI_TKILL" {
		t.Error("signal naming")
	}
	if !HasFaultAddr(11, 1) || HasFaultAddr(6, -6) {
		t.Error("fault address rule")
	}
}

func BenchmarkEncode(b *testing.B) {
	r := sample()
	for i := 0; i < 6; i++ {
		r.Threads = append(r.Threads, r.Threads[0])
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Encode(r); err != nil {
			b.Fatal(err)
		}
	}
}

// The handler encodes with jsonlite; hosts decode with encoding/json. Both
// must agree byte for byte on every field.
func TestEncodingIsEncodingJSON(t *testing.T) {
	fa := Hex(0xdeadbeef)
	r := &Report{
		Version: Version, ID: "0123456789abcdef0123456789abcdef", Time: 1767225601, TimeTrusted: true,
		BootID: "b", DeviceID: "d", Kernel: "6.1.0 <&>", Arch: "arm",
		Signal: Signal{Number: 11, Name: "SIGSEGV", Code: 1, CodeName: "SEGV_MAPERR", FaultAddr: &fa},
		PID:    1, TID: 2, Comm: "c\u2028\xff", Exe: "/bin/x", Cmdline: []string{"x", "-v"},
		Modules: []Module{{Path: "/bin/x", BuildID: "ab", BuildIDKind: "gnu", Start: 0x1000, End: 0x2000, RuntimeOffset: 0x1000, Error: "e"}},
		Threads: []Thread{{TID: 2, Name: "t", Crashed: true, Frames: []Frame{{PC: 0x1004, Method: "context", Trust: "high", Exact: true, Thumb: true, Note: "n"}, {PC: 0x1008, Method: "cfi", Module: -1}}, StopReason: "end", StopDetail: "d", Elided: 3, ElidedAt: 1}, {Frames: []Frame{}}},
		Partial: true, Errors: []string{"x"}, Dropped: map[string]int{"rate_limit": 2, "queue_full": 1},
		Handler: Handler{Version: "v", Mode: "live", DurationMS: 3, FrozenMS: 1, MaxRSSKiB: 5000},
	}
	for _, r := range []*Report{r, {Version: Version}} {
		want, _ := json.Marshal(r)
		got, err := jsonlite.Marshal(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("jsonlite:\n%s (%v)\nencoding/json:\n%s", got, err, want)
		}
		want, _ = json.MarshalIndent(r, "", "  ")
		if got, err := r.MarshalIndent(); err != nil || !bytes.Equal(got, want) {
			t.Errorf("indented: jsonlite:\n%s (%v)\nencoding/json:\n%s", got, err, want)
		}
	}
}

func TestMaskToPage(t *testing.T) {
	for in, want := range map[Hex]Hex{0: 0, 0x10: 0, 0xdeadbeef: 0xdeadb000, 0xffff_8000_1234_5fff: 0xffff_8000_1234_5000} {
		if got := MaskToPage(in); got != want {
			t.Errorf("MaskToPage(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestValidateTrust(t *testing.T) {
	r := &Report{Version: Version, ID: strings.Repeat("ab", 16), Threads: []Thread{{Frames: []Frame{{Module: -1, Trust: "high"}, {Module: -1}}}}}
	if err := r.Validate(); err != nil {
		t.Errorf("valid trust levels: %v", err)
	}
	r.Threads[0].Frames[1].Trust = "certain"
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "trust") {
		t.Errorf("unknown trust level: %v", err)
	}
}

// TestReleaseAndDevice: the fields are in the JSON when set, absent when
// not (a report from an older handler reads the same), and bounded.
func TestReleaseAndDevice(t *testing.T) {
	r := sample()
	js, _ := jsonlite.Marshal(r)
	if bytes.Contains(js, []byte(`"release"`)) || bytes.Contains(js, []byte(`"device"`)) {
		t.Errorf("empty release or device written: %s", js)
	}
	r.Release = &Release{ID: "poky", ImageVersion: "2.4.1"}
	r.Device = &Device{Attributes: map[string]string{"hw_rev": "B2", "channel": "beta"}}
	js, _ = jsonlite.Marshal(r)
	for _, want := range []string{`"release":{"id":"poky","image_version":"2.4.1"}`, `"device":{"attributes":{"channel":"beta","hw_rev":"B2"}}`} {
		if !bytes.Contains(js, []byte(want)) {
			t.Errorf("JSON lacks %s: %s", want, js)
		}
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || back.Release.ImageVersion != "2.4.1" || back.Device.Attributes["hw_rev"] != "B2" {
		t.Fatalf("%v %+v", err, back)
	}
	if err := back.Validate(); err != nil {
		t.Fatal(err)
	}
	big := map[string]string{}
	for i := 0; i <= MaxAttributes; i++ {
		big[strings.Repeat("k", i+1)] = "v"
	}
	for _, bad := range []*Report{
		{Device: &Device{Attributes: big}},
		{Device: &Device{Attributes: map[string]string{"k": strings.Repeat("v", MaxAttributeValue+1)}}},
		{Device: &Device{Attributes: map[string]string{"": "v"}}},
		{Release: &Release{BuildID: strings.Repeat("v", MaxReleaseValue+1)}},
		{Threads: []Thread{{Frames: make([]Frame, MaxFrames+1)}}},
		{Threads: make([]Thread, MaxThreads+1)},
	} {
		b := sample()
		if bad.Device != nil {
			b.Device = bad.Device
		}
		if bad.Release != nil {
			b.Release = bad.Release
		}
		if bad.Threads != nil {
			b.Threads = bad.Threads
		}
		if err := b.Validate(); err == nil {
			t.Errorf("accepted %+v %+v threads %d", b.Device, b.Release, len(b.Threads))
		}
	}
}
