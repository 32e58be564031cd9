package symbolize

import (
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/report"
)

// TestPlainText: an unsymbolized report prints like a symbolized one, the
// crashed thread first, each frame at its module and file address (or
// saying it is in none), the elision and the stop reason in place.
func TestPlainText(t *testing.T) {
	r := &report.Report{
		Arch:    "aarch64",
		Modules: []report.Module{{Path: "/usr/bin/crash", Start: 0x5500000000, End: 0x5500010000, RuntimeOffset: 0x5500000000, CompiledOffset: 0}},
		Threads: []report.Thread{
			{TID: 2, Name: "idle", StopReason: "end_of_stack", Frames: []report.Frame{{PC: 0x10, Module: -1, Method: "context"}}},
			{TID: 1, Name: "crash", Crashed: true, StopReason: "no_unwind_info", StopDetail: "libc", Elided: 4, ElidedAt: 1, Frames: []report.Frame{
				{PC: 0x5500001234, Module: 0, Method: "context", Exact: true},
				{PC: 0x5500002000, Module: 0, Method: "cfi"},
			}},
		},
	}
	var b strings.Builder
	if err := WriteText(&b, Plain(r)); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"Thread 1 \"crash\" (crashed):\n#0  0x0000005500001234 in ?? (/usr/bin/crash+0x1234) [context]\n    ... 4 frames elided ...\n#1  0x0000005500002000 in ?? (/usr/bin/crash+0x2000) [cfi]\n    (stop: no_unwind_info: libc)\n",
		"Thread 2 \"idle\":\n#0  0x0000000000000010 in ?? (not in a module) [context]\n    (stop: end_of_stack)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n%s\nin\n%s", want, got)
		}
	}
	if strings.Index(got, "Thread 1") > strings.Index(got, "Thread 2") {
		t.Errorf("crashed thread not first:\n%s", got)
	}
}
