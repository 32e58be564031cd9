package main

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// fuzzSeedReport is a report as a board sends it: two modules, a crashed
// thread whose frames include a signal frame and a PC outside every
// module, a deep recursion with elided frames.
func fuzzSeedReport() *report.Report {
	fa := report.Hex(0x10)
	return &report.Report{
		Version: report.Version, ID: "0123456789abcdef0123456789abcdef", Time: 1790000000,
		Arch: "arm", PID: 7, TID: 7, Comm: "crash", Exe: "/usr/bin/crash",
		Signal: report.Signal{Number: 11, Name: "SIGSEGV", Code: 1, CodeName: "SEGV_MAPERR", FaultAddr: &fa},
		Modules: []report.Module{
			{Path: "/usr/bin/crash", BuildID: "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12", BuildIDKind: "gnu", Start: 0x400000, End: 0x402000, RuntimeOffset: 0x400000},
			{Path: "/lib/libc.so.6", BuildID: "00112233445566778899aabbccddeeff", BuildIDKind: "code", Start: 0xb6e00000, End: 0xb6f00000, RuntimeOffset: 0xb6e00000, CompiledOffset: 0x1000},
		},
		Threads: []report.Thread{
			{TID: 7, Name: "crash", Crashed: true, StopReason: "end_of_stack", Frames: []report.Frame{
				{PC: 0x400123, Method: "context", Exact: true, Thumb: true},
				{PC: 0xb6e01234, Method: "signal", Module: 1, Exact: true},
				{PC: 0x400457, Method: "ehabi"},
				{PC: 0x12, Method: "lr", Module: -1},
			}},
			{TID: 8, Name: "worker", StopReason: "max_frames", Elided: 1000, ElidedAt: 1, Frames: []report.Frame{
				{PC: 0x400200, Method: "context", Exact: true},
				{PC: 0x400300, Method: "fp"},
			}},
		},
		Handler: report.Handler{Version: "test", Mode: "live"},
	}
}

// FuzzDecodeCommand feeds arbitrary bytes to what `unwound decode` and
// `unwound symbolize` do with a report file: decode (zstd or JSON,
// validation), the text summary, the JSON printer, and symbolization
// against an empty sysroot with its text and JSON output. A report is
// outside input: nothing may panic.
func FuzzDecodeCommand(f *testing.F) {
	r := fuzzSeedReport()
	js, _ := json.Marshal(r)
	z, _ := report.Encode(r)
	f.Add(js)
	f.Add(z)
	f.Add(z[:len(z)/2])
	f.Add([]byte(`{"version":1,"id":"00000000000000000000000000000000","threads":[{"frames":[{"pc":"0x1","module":5}]}]}`))
	f.Add([]byte(`{"version":1,"id":"00000000000000000000000000000000","modules":[{"path":"/../../etc/passwd","build_id":"zz"}],"threads":[{"elided":3,"elided_at":9,"frames":[{"pc":"0x0","module":0}]}]}`))
	f.Add([]byte("-"))
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode.Report(b)
		if err != nil {
			return
		}
		if err := summary(io.Discard, r); err != nil {
			t.Fatal(err)
		}
		if err := handler.PrintJSON(io.Discard, r); err != nil {
			t.Fatal(err)
		}
		s := symbolize.New(symbolize.Options{Sysroot: root})
		defer s.Close()
		res := s.Symbolize(r)
		if err := symbolize.WriteText(io.Discard, res); err != nil {
			t.Fatal(err)
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatal(err)
		}
	})
}
