package sentry

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// Every real report converts to an event Sentry's schema accepts, with
// the signal, every thread oldest call first and every module.
func TestEventFromRealReports(t *testing.T) {
	for _, name := range realReports {
		t.Run(name, func(t *testing.T) {
			r, raw := loadReport(t, name)
			ev, err := NewEvent(Input{Report: r, Raw: raw, Signature: "null_write|nw3|nw2"})
			if err != nil {
				t.Fatal(err)
			}
			validate(t, ev)
			if ev.Platform != "native" || ev.Level != "fatal" {
				t.Errorf("platform %q level %q", ev.Platform, ev.Level)
			}
			if ev.EventID != EventID(r.ID) || len(ev.EventID) != 32 || ev.EventID == r.ID {
				t.Errorf("event id %s for report %s", ev.EventID, r.ID)
			}
			if len(ev.Fingerprint) != 1 || ev.Fingerprint[0] != "null_write|nw3|nw2" {
				t.Errorf("fingerprint %q", ev.Fingerprint)
			}
			if ev.Timestamp != float64(r.Time) {
				t.Errorf("timestamp %v, report time %d", ev.Timestamp, r.Time)
			}
			ex := ev.Exception.Values[0]
			if ex.Type != "SIGSEGV" || ex.Mechanism.Type != "signalhandler" || ex.Mechanism.Handled {
				t.Errorf("exception %+v", ex)
			}
			sig := ex.Mechanism.Meta.Signal
			if sig.Number != 11 || *sig.Code != r.Signal.Code || sig.Name != "SIGSEGV" || sig.CodeName != "SEGV_MAPERR" {
				t.Errorf("signal %+v", sig)
			}
			if !strings.Contains(ex.Value, "SEGV_MAPERR (code 1) at "+r.Signal.FaultAddr.String()) {
				t.Errorf("value %q", ex.Value)
			}
			if ex.ThreadID == nil || int(*ex.ThreadID) != r.Crashed().TID || ex.Stacktrace == nil {
				t.Errorf("exception thread %v, stacktrace %v", ex.ThreadID, ex.Stacktrace != nil)
			}
			if len(ev.Threads.Values) != len(r.Threads) {
				t.Fatalf("%d threads, report has %d", len(ev.Threads.Values), len(r.Threads))
			}
			for i, th := range ev.Threads.Values {
				rt := r.Threads[i]
				if int(th.ID) != rt.TID || th.Crashed != rt.Crashed || th.Name != rt.Name {
					t.Errorf("thread %d: %+v", i, th)
				}
				checkFrames(t, r, rt, th.Stacktrace)
			}
			if len(ev.DebugMeta.Images) != len(r.Modules) {
				t.Errorf("%d images for %d modules", len(ev.DebugMeta.Images), len(r.Modules))
			}
			for i, img := range ev.DebugMeta.Images {
				m := r.Modules[i]
				did, _ := DebugID(m.BuildID)
				if img.CodeID != m.BuildID || img.DebugID != did || img.CodeFile != m.Path || img.ImageAddr != m.Start.String() || img.ImageSize != uint64(m.End-m.Start) {
					t.Errorf("image %+v for module %+v", img, m)
				}
			}
			if ev.Tags["program"] != "crash" || ev.Tags["device_id"] != r.DeviceID || ev.Tags["signal"] != "SIGSEGV" || ev.Tags["report_id"] != r.ID {
				t.Errorf("tags %v", ev.Tags)
			}
			osc := ev.Contexts["os"].(map[string]any)
			if osc["name"] != "Linux" || osc["kernel_version"] != r.Kernel {
				t.Errorf("os context %v", osc)
			}
		})
	}
}

// checkFrames: oldest call first, each report frame's PC (adjusted as
// the stack trace says), the module as the package.
func checkFrames(t *testing.T, r *report.Report, rt report.Thread, st *Stacktrace) {
	t.Helper()
	var addrs []string
	elided := 0
	for _, f := range st.Frames {
		if f.InstructionAddr == "" {
			elided++
			if !strings.Contains(f.Function, "frames elided") {
				t.Errorf("frame without an address: %+v", f)
			}
			continue
		}
		addrs = append(addrs, f.InstructionAddr)
	}
	if want := map[bool]int{true: 1, false: 0}[rt.Elided > 0]; elided != want {
		t.Errorf("thread %d: %d elision markers, elided %d", rt.TID, elided, rt.Elided)
	}
	if len(addrs) != len(rt.Frames) {
		t.Fatalf("thread %d: %d frames, report has %d", rt.TID, len(addrs), len(rt.Frames))
	}
	hasSignal := false
	for _, f := range rt.Frames {
		hasSignal = hasSignal || f.Method == "signal"
	}
	wantAdj := "all_but_first"
	if hasSignal {
		wantAdj = "none"
	}
	if st.InstructionAddrAdjustment != wantAdj {
		t.Errorf("thread %d: adjustment %q, want %q", rt.TID, st.InstructionAddrAdjustment, wantAdj)
	}
	n := len(rt.Frames)
	for i, f := range rt.Frames {
		pc := f.PC
		if wantAdj == "none" && !exact(rt, i) {
			pc--
		}
		if got := addrs[n-1-i]; got != pc.String() {
			t.Errorf("thread %d: frame %d (oldest first %d) at %s, want %v", rt.TID, i, n-1-i, got, pc)
		}
	}
	if rt.Elided > 0 {
		// The marker sits between the frames around the elision.
		at := n - rt.ElidedAt
		if !strings.Contains(st.Frames[at].Function, "frames elided") {
			t.Errorf("elision marker at %d: %+v", at, st.Frames[at])
		}
	}
	for _, f := range st.Frames {
		if f.InstructionAddr == "" {
			continue
		}
		if f.Package == "" || *f.InApp != (f.Package == r.Exe) {
			t.Errorf("frame %+v", f)
		}
	}
}

// The board's release (os-release) and device attributes, which newer
// handlers add to the report, become the event's release, dist and tags.
func TestEventRelease(t *testing.T) {
	r, raw := loadReport(t, "nullwrite")
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	js = bytes.Replace(js, []byte(`"arch":`), []byte(`"release":{"id":"poky","version_id":"5.0.4","image_id":"core-image-minimal","image_version":"2026.11.2","build_id":"20261126/1"},"device":{"attributes":{"hw_rev":"B2","channel":"beta","program":"not ours"}},"arch":`), 1)
	_ = raw
	ev, err := NewEvent(Input{Report: r, Raw: js})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, ev)
	if ev.Release != "core-image-minimal@2026.11.2" || ev.Dist != "20261126-1" {
		t.Errorf("release %q dist %q", ev.Release, ev.Dist)
	}
	for k, v := range map[string]string{"os.id": "poky", "os.version_id": "5.0.4", "image.id": "core-image-minimal", "image.version": "2026.11.2", "build_id": "20261126/1", "hw_rev": "B2", "channel": "beta", "program": "crash"} {
		if ev.Tags[k] != v {
			t.Errorf("tag %s = %q, want %q", k, ev.Tags[k], v)
		}
	}
	osc := ev.Contexts["os"].(map[string]any)
	if d := osc["distribution"].(map[string]any); d["name"] != "poky" || d["version"] != "5.0.4" {
		t.Errorf("distribution %v", d)
	}
	// Unreadable raw bytes lose the release, not the event.
	ev, err = NewEvent(Input{Report: r, Raw: []byte("\x28\xb5\x2f\xfdgarbage")})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, ev)
	if ev.Release != "" || ev.Extra["release_error"] == nil {
		t.Errorf("release %q, extra %v", ev.Release, ev.Extra)
	}
	// Without an image, the distribution is the release.
	js2 := bytes.Replace(js, []byte(`"image_id":"core-image-minimal","image_version":"2026.11.2",`), nil, 1)
	ev, err = NewEvent(Input{Report: r, Raw: js2})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, ev)
	if ev.Release != "poky@5.0.4" {
		t.Errorf("release %q", ev.Release)
	}
}

// A board without a set clock: the event takes the time it arrived.
func TestEventUntrustedTime(t *testing.T) {
	r, _ := loadReport(t, "threads")
	r.Time, r.TimeTrusted = 12, false
	at := time.Date(2026, 11, 26, 10, 0, 0, 250e6, time.UTC)
	ev, err := NewEvent(Input{Report: r, Received: at})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, ev)
	if ev.Timestamp != 1795687200.25 {
		t.Errorf("timestamp %v", ev.Timestamp)
	}
}

// Modules without a GNU build ID: the handler's code ID is unwound's own
// hash, so it gives a debug_id but no code_id; modules with no id at all
// are no debug image. Withheld PCs stay withheld.
func TestEventOddModules(t *testing.T) {
	r, _ := loadReport(t, "threads")
	r.Modules[0].BuildIDKind = "code"
	r.Modules[0].BuildID = "0123456789abcdef0123456789abcdef"
	r.Modules[1].BuildID, r.Modules[1].BuildIDKind = "", ""
	r.Threads[0].Frames[2].Withheld = true
	r.Threads[0].Frames[2].PC = 0
	r.Threads[0].Frames[2].Module = -1
	ev, err := NewEvent(Input{Report: r})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, ev)
	if len(ev.DebugMeta.Images) != len(r.Modules)-1 || ev.DebugMeta.Images[0].CodeID != "" || ev.DebugMeta.Images[0].DebugID != "67452301-ab89-efcd-0123-456789abcdef" {
		t.Errorf("images %+v", ev.DebugMeta.Images)
	}
	fs := ev.Threads.Values[0].Stacktrace.Frames
	w := fs[len(fs)-3]
	if w.InstructionAddr != "0x0" || !strings.Contains(w.Function, "withheld") || *w.InApp {
		t.Errorf("withheld frame %+v", w)
	}
	if _, err := NewEvent(Input{Report: &report.Report{ID: "short"}}); err == nil {
		t.Error("report id 'short': no error")
	}
}

func TestEventIDStable(t *testing.T) {
	a := EventID("04d4a293b1e0a7fc8c91f037ee21d071")
	if a != EventID("04D4A293B1E0A7FC8C91F037EE21D071") || a == EventID("04d4a293b1e0a7fc8c91f037ee21d072") {
		t.Error("event ids are not a function of the report id")
	}
	// A version 5 UUID, RFC 4122 variant.
	if a[12] != '5' || !strings.ContainsRune("89ab", rune(a[16])) {
		t.Errorf("event id %s: not a version 5 UUID", a)
	}
}

// Symbolized frames: a report frame with calls inlined into it becomes
// one Sentry frame per function, the function the code belongs to first,
// all at the frame's address.
func TestEventSymbolizedInlines(t *testing.T) {
	r, _ := loadReport(t, "nullwrite")
	res := &symbolize.Result{Report: r}
	for _, th := range r.Threads {
		st := symbolize.Thread{Thread: th}
		for _, f := range th.Frames {
			st.Frames = append(st.Frames, symbolize.Frame{Frame: f})
		}
		res.Threads = append(res.Threads, st)
	}
	res.Threads[0].Frames[0].Locations = []symbolize.Location{
		{Function: "store", File: "/src/crash/store.h", Line: 12, Column: 5, Inlined: true, Source: "dwarf"},
		{Function: "null_write", Mangled: "_Z10null_writei", File: "/src/crash/crash.c", Line: 23, Source: "dwarf"},
	}
	ev, err := NewEvent(Input{Report: r, Symbols: res})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, ev)
	fs := ev.Threads.Values[0].Stacktrace.Frames
	if len(fs) != len(r.Threads[0].Frames)+1 {
		t.Fatalf("%d frames for %d PCs and one inlined call", len(fs), len(r.Threads[0].Frames))
	}
	outer, inner := fs[len(fs)-2], fs[len(fs)-1]
	pc := r.Threads[0].Frames[0].PC.String()
	if outer.Function != "null_write" || outer.Symbol != "_Z10null_writei" || outer.Filename != "crash.c" || outer.AbsPath != "/src/crash/crash.c" || outer.Lineno != 23 || outer.InstructionAddr != pc {
		t.Errorf("outer frame %+v", outer)
	}
	if inner.Function != "store" || inner.Filename != "store.h" || inner.Lineno != 12 || inner.Colno != 5 || inner.InstructionAddr != pc {
		t.Errorf("inlined frame %+v", inner)
	}
}

// FuzzEvent: any report the decoder accepts, with any extra fields,
// converts without a panic into an event Sentry's schema accepts.
func FuzzEvent(f *testing.F) {
	for _, name := range realReports {
		raw, err := os.ReadFile(filepath.Join("testdata", name+".json.zst"))
		if err != nil {
			f.Fatal(err)
		}
		js, _ := decode.JSON(raw)
		f.Add(js)
	}
	f.Add([]byte(`{"version":1,"id":"00000000000000000000000000000001","arch":"arm","signal":{"number":7},"release":{"id":"a/b","version_id":"1\n2"},"device":{"attributes":{"":"x","k":"v"}},"modules":[{"path":"p","build_id":"ab","start":"0x10","end":"0x20","runtime_offset":"0x10","compiled_offset":"0x0"}],"threads":[{"tid":1,"crashed":true,"frames":[{"pc":"0x11","module":0},{"pc":"0x0","module":-1,"withheld":true}],"elided":3,"elided_at":1}]}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		r, err := decode.Report(js)
		if err != nil {
			return
		}
		ev, err := NewEvent(Input{Report: r, Raw: js})
		if err != nil {
			return
		}
		p, err := ev.Payload()
		if err != nil {
			t.Fatalf("payload: %v", err)
		}
		validatePayload(t, p)
	})
}
