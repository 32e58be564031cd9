package handler

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
)

// hostileCase is a crafted core and what the report must say of it.
type hostileCase struct {
	name string
	core []byte
	hold bool   // the pipe stays open after the bytes (a stalled writer)
	why  string // a substring of the report's errors
	// For cores that are well-formed (crafted stacks), or whose lie does
	// not matter: the crashed thread's acceptable stop reasons.
	stops     []string
	maxFrames int // frames in that trace at most; 0: 8
}

func hostileCores() []hostileCase {
	good, ph := stackCore().layout()
	noteOff := int(le.Uint64(good[ph[0]+8:]))
	var cs []hostileCase
	add := func(name string, b []byte, why string) { cs = append(cs, hostileCase{name: name, core: b, why: why}) }

	add("empty", nil, "truncated")
	add("garbage", bytes.Repeat([]byte("unwound!"), 4096), "not an ELF file")
	add("phnum lies", patch(good, 56, 5000, 2), "")
	add("phoff past the end", patch(good, 32, 1<<40, 8), "truncated")
	add("PN_XNUM, count not derivable", patch(patch(good, 56, 0xffff, 2), ph[0]+8, 1<<20, 8), "PN_XNUM")
	// Harmless: the count comes from the first PT_NOTE, e_shoff is never read.
	cs = append(cs, hostileCase{name: "PN_XNUM, section header past the end", core: patch(patch(good, 56, 0xffff, 2), 40, 1<<40, 8),
		stops: []string{"no_unwind_info"}})
	add("load behind the notes", patch(good, ph[1]+8, 0, 8), "inside the headers or notes")
	add("load filesz 2^63", patch(good, ph[1]+32, 1<<63, 8), "p_filesz")
	add("note longer than the stream", patch(good, ph[0]+32, 15<<20, 8), "truncated")
	add("a million threads claimed", patch(good, ph[0]+32, 1_000_000*408, 8), "limit")
	add("note descsz huge", patch(good, noteOff+4, 0xfffffff0, 4), "runs past the end of PT_NOTE")
	add("cut in the notes", good[:noteOff+500], "truncated")

	over := stackCore()
	over.segs = append(over.segs, over.segs[0], over.segs[0])
	ob, oph := over.layout()
	ob = patch(ob, oph[2]+8, le.Uint64(ob[oph[1]+8:]), 8) // same file bytes
	add("overlapping segments", ob, "overlaps")

	many := stackCore()
	for i := 0; i < 30000; i++ {
		many.threads = append(many.threads, synthThread{tid: 10000 + i, pc: 0x400100, sp: 0x7ff0001000})
	}
	add("30000 threads present", many.bytes(), "max_threads")

	nf := stackCore()
	var d []byte
	d = le.AppendUint64(d, 1<<60)
	d = le.AppendUint64(d, 4096)
	nf.extra = append(nf.extra, note("CORE", 0x46494c45, append(d, make([]byte, 64)...)))
	add("NT_FILE count 2^60", nf.bytes(), "NT_FILE claims")

	cs = append(cs, hostileCase{name: "stream stalls after the notes", core: good[:noteOff+2000], hold: true, why: "core"})

	// Crafted stacks. The stack segment is at S; the PCs are in
	// /usr/bin/victim, which the handler cannot open: frame pointers.
	const S = 0x7ff0000000
	stack := func(words map[uint64]uint64, t synthThread) []byte {
		c := stackCore()
		c.threads = c.threads[:1]
		c.threads[0] = t
		for a, v := range words {
			le.PutUint64(c.segs[0].data[a-S:], v)
		}
		return c.bytes()
	}
	// The frame-pointer strategy refuses a record that does not move up
	// the stack; the trace ends there.
	fpStops := []string{"no_unwind_info", "repeated_frame", "sp_not_increasing"}
	cs = append(cs,
		hostileCase{name: "frame pointer points at itself", stops: fpStops,
			core: stack(map[uint64]uint64{S + 0x1100: S + 0x1100, S + 0x1108: 0x400200},
				synthThread{tid: 1, pc: 0x400123, sp: S + 0x1000, fp: S + 0x1100})},
		hostileCase{name: "frame pointers in a cycle", stops: fpStops,
			core: stack(map[uint64]uint64{S + 0x1100: S + 0x1200, S + 0x1108: 0x400200, S + 0x1200: S + 0x1100, S + 0x1208: 0x400300},
				synthThread{tid: 1, pc: 0x400123, sp: S + 0x1000, fp: S + 0x1100})},
		hostileCase{name: "SP going backwards", stops: fpStops,
			core: stack(map[uint64]uint64{S + 0x1100: S + 0x800, S + 0x1108: 0x400200},
				synthThread{tid: 1, pc: 0x400123, sp: S + 0x1000, fp: S + 0x1100})},
	)
	// Signal frames whose saved SPs point at each other: SP goes back
	// and forth, which only a signal frame may do.
	sig := stackCore()
	sig.threads = sig.threads[:1]
	const T = 0x10000 // the trampoline's page, outside every file
	code := make([]byte, 4096)
	le.PutUint32(code[0:], 0xd2801168) // mov x8, #139
	le.PutUint32(code[4:], 0xd4000001) // svc #0
	sig.segs = append(sig.segs, synthSeg{vaddr: T, memsz: 4096, flags: 5, data: code})
	frame := func(at, sp uint64) {
		le.PutUint64(sig.segs[0].data[at-S+0x138+31*8:], sp) // saved sp
		le.PutUint64(sig.segs[0].data[at-S+0x138+32*8:], T)  // saved pc
	}
	frame(S+0x1000, S+0x2000)
	frame(S+0x2000, S+0x1000)
	sig.threads[0] = synthThread{tid: 1, pc: T, sp: S + 0x1000}
	cs = append(cs, hostileCase{name: "signal frames in a loop", core: sig.bytes(), stops: []string{"sp_not_increasing", "loop", "repeated_frame"}, maxFrames: 40})
	return cs
}

// The handler binary, on every crafted core, in kernel mode (stream, as
// the kernel pipes it), offline from a file and offline from stdin:
// finishes within its deadline and memory bound, exits 0 and writes a
// report that says what was wrong.
func TestHostileCores(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("needs prlimit (util-linux)")
	}
	bin := handlerBinary(t, "")
	for _, tc := range hostileCores() {
		t.Run(tc.name, func(t *testing.T) {
			for _, mode := range []string{"kernel", "file", "stdin"} {
				var run childRun
				if mode == "kernel" {
					run = runHandler(t, bin, tc.core, tc.hold, "")
					if len(run.reports) != 1 {
						t.Fatalf("%s: %d reports, exit %d; stderr:\n%s", mode, len(run.reports), run.rc, run.log)
					}
				} else {
					run = runOffline(t, bin, tc.core, mode == "stdin", tc.hold)
				}
				if run.rc != 0 || len(run.reports) != 1 {
					t.Fatalf("%s: exit %d, %d reports; stderr:\n%s", mode, run.rc, len(run.reports), run.log)
				}
				r := run.reports[0]
				// The deadline runs on the handler's own clock, from its
				// start; the wall time adds fork, exec and the runtime's
				// start, which a loaded host stretches. Past the hard
				// deadline (4 s) there would be no report at all.
				if r.Handler.DurationMS > 3000 || run.elapsed > 15*time.Second {
					t.Errorf("%s: took %d ms by its own clock (%v in all), deadline 2s", mode, r.Handler.DurationMS, run.elapsed)
				}
				if r.Handler.Mode == "registers" {
					// The supervised child died (its data segment is
					// capped, limitMemory) or overran: not good enough.
					t.Errorf("%s: the unwinding child failed: %q", mode, r.Errors)
				}
				errs := strings.Join(r.Errors, "; ")
				if tc.stops == nil && (!r.Partial || len(r.Errors) == 0 || !strings.Contains(errs, tc.why)) {
					t.Errorf("%s: partial %v, errors %q, want one with %q", mode, r.Partial, errs, tc.why)
				}
				if tc.stops != nil {
					max := 8
					if tc.maxFrames > 0 {
						max = tc.maxFrames
					}
					if ct := r.Crashed(); ct == nil || !slices.Contains(tc.stops, ct.StopReason) || len(ct.Frames) > max {
						b, _ := json.Marshal(r.Threads)
						t.Errorf("%s: threads %.300s, want at most %d frames stopped by one of %s", mode, b, max, tc.stops)
						if ct != nil {
							t.Logf("%d frames, stop %s (%s)", len(ct.Frames), ct.StopReason, ct.StopDetail)
						}
					}
				}
				t.Logf("%-6s %4d ms partial=%v errors=%.200s", mode, run.elapsed.Milliseconds(), r.Partial, errs)
			}
		})
	}
}

// runOffline runs --core-file on the core, from a file or from stdin.
func runOffline(t *testing.T, bin string, core []byte, stdin, hold bool) childRun {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "u.toml")
	os.WriteFile(cfg, []byte("[handler]\ndeadline = \"2s\"\n"), 0o600)
	path := filepath.Join(dir, "core")
	os.WriteFile(path, core, 0o600)
	arg := path
	if stdin {
		arg = "-"
	}
	// The Go runtime holds ~40 MiB of VmData at start; 128 MiB in all
	// bounds what the core can make the handler allocate (the runtime
	// dies of "out of memory" past it, and the test fails).
	cmd := exec.Command("prlimit", "--data=134217728", bin, "--config", cfg, "--core-file", arg, "--sysroot", dir, "--print-json")
	var out bytes.Buffer
	cmd.Stdout = &out
	run := feedRun(t, cmd, stdin, core, hold)
	var r report.Report
	if err := json.Unmarshal(out.Bytes(), &r); err == nil {
		run.reports = append(run.reports, &r)
	}
	return run
}
