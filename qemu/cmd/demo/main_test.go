package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/report/decode"
)

// warningRE matches what must never be in the demo's output: a warning
// from the board (the uploader's drift check, the handler's kernel log,
// an init script that failed), from the symbolizer, or from the demo
// itself (something it needed was missing).
var warningRE = regexp.MustCompile(`(?i)warn|drift|error|fail|missing|\?\?`)

// symResult is the part of `unwound symbolize --format json` checked here.
type symResult struct {
	Threads []struct {
		TID    int `json:"tid"`
		Frames []struct {
			PC        string `json:"pc"`
			Module    int    `json:"module"`
			Error     string `json:"error"`
			Locations []struct {
				Function string `json:"function"`
				File     string `json:"file"`
				Line     int    `json:"line"`
				Source   string `json:"source"`
			} `json:"locations"`
		} `json:"frames"`
	} `json:"threads"`
	Modules []struct {
		Path string `json:"path"`
	} `json:"modules"`
}

// TestDemo runs `make demo` (the arm64 board) and asserts what a newcomer
// must see: no warning anywhere in the output, and every frame of every
// thread named, with file:line wherever debug info exists: the program
// (built -g) and, through libc6-dbg, Debian's libc. It is also the serial
// end-to-end test: the report went from the kernel through the handler,
// the queue and the uploader daemon over the board's serial line to
// `unwound receive`, and the board's queue is empty afterwards (entries
// are removed only once acknowledged). The other boards (arm, riscv64,
// x86_64) run when UNWOUND_TEST_DEMO=all (or a list: "arm x86_64").
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	arches := []string{"aarch64"}
	switch v := os.Getenv("UNWOUND_TEST_DEMO"); v {
	case "":
	case "all":
		arches = []string{"aarch64", "arm", "riscv64", "x86_64"}
	default:
		arches = strings.Fields(v) // e.g. "arm x86_64"
	}
	for _, arch := range arches {
		arch := arch
		t.Run(arch, func(t *testing.T) {
			var out bytes.Buffer
			coll := t.TempDir()
			res, err := run(&out, arch, "", "threads", t.TempDir(), coll)
			t.Logf("demo output:\n%s", out.String())
			if err != nil {
				t.Fatal(err)
			}
			checkDemo(t, out.String())
			checkProgram(t, res.Program)
			z, err := os.ReadFile(res.Reports[0])
			if err != nil {
				t.Fatal(err)
			}
			r, err := decode.Report(z)
			if err != nil {
				t.Fatal(err)
			}
			if r.Exe != "/usr/bin/crash" || r.Arch != arch || len(r.Threads) != 4 || r.Handler.Mode != "live" {
				t.Errorf("report: exe %q, arch %s, %d threads, mode %s", r.Exe, r.Arch, len(r.Threads), r.Handler.Mode)
			}
			js, err := exec.Command(res.Unwound, res.SymbolizeArgs(res.Reports[0], "--format", "json")...).Output()
			if err != nil {
				t.Fatalf("symbolize: %v", err)
			}
			var sym symResult
			if err := json.Unmarshal(js, &sym); err != nil {
				t.Fatal(err)
			}
			checkFrames(t, &sym)
			checkCollector(t, coll, r.ID, out.String())
		})
	}
}

func checkDemo(t *testing.T, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if !warningRE.MatchString(l) {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(l), "(stop: end_of_stack: ") {
			continue // why the walk ended where the stack does: each method's reason, not a warning
		}
		t.Errorf("demo output has a warning: %s", l)
	}
	for _, want := range []string{"Running sysctl: OK", "Starting unwound: OK", "demo: queue drained", "UNWOUND-GUEST-DONE rc=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

// checkCollector: the report is in the demo's collector, symbolized and
// grouped by its crashed thread, and the demo said how to open the page.
func checkCollector(t *testing.T, dir, id, out string) {
	t.Helper()
	c, err := collector.Open(dir, collector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.Report(id)
	if err != nil {
		t.Fatalf("the report is not in the collector: %v", err)
	}
	if !strings.Contains(d.Signature, "null_write") || d.Missing != 0 {
		t.Errorf("collector: signature %q, %d crashed-thread frames without a symbol", d.Signature, d.Missing)
	}
	for _, want := range []string{"in the collector " + dir + ": group " + d.Group, "unwound serve --dir " + dir, "http://127.0.0.1:8080/group/" + d.Group} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

// checkProgram: the board's program is stripped as Yocto and Buildroot
// strip it and carries our MiniDebugInfo, as with the Buildroot option.
func checkProgram(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []string{".symtab", ".debug_info", ".debug_frame", ".comment"} {
		if f.Section(n) != nil {
			t.Errorf("the board's %s has %s: not stripped", path, n)
		}
	}
	if s := f.Section(".gnu_debugdata"); s == nil || s.Size == 0 {
		t.Errorf("the board's %s has no .gnu_debugdata (MiniDebugInfo)", path)
	}
}

// checkFrames: every frame has a function name; every frame has file:line
// except _start (crt1.o, which the cross toolchain's libc6-dev ships
// without DWARF). libc frames included, on every arch: the board runs
// Debian's libc6 and the host has its libc6-dbg.
func checkFrames(t *testing.T, sym *symResult) {
	t.Helper()
	frames, named, lines := 0, 0, 0
	for _, th := range sym.Threads {
		if len(th.Frames) < 3 {
			t.Errorf("thread %d: only %d frames", th.TID, len(th.Frames))
		}
		for i, f := range th.Frames {
			frames++
			if len(f.Locations) == 0 || f.Locations[len(f.Locations)-1].Function == "" {
				t.Errorf("thread %d frame #%d pc %s: no function name (%s)", th.TID, i, f.PC, f.Error)
				continue
			}
			named++
			outer := f.Locations[len(f.Locations)-1]
			if outer.Function == "_start" {
				continue
			}
			if outer.File == "" || outer.Line == 0 || outer.Source != "dwarf" {
				t.Errorf("thread %d frame #%d pc %s: %s has no file:line (%s)", th.TID, i, f.PC, outer.Function, outer.Source)
				continue
			}
			lines++
		}
	}
	t.Logf("%d threads, %d frames: %d checked and named, %d of them with file:line", len(sym.Threads), frames, named, lines)
}
