package main

// Naming a report's frames from debug files: `unwound symbolize` (from a
// build-id tree, a debuginfod server or a collector's store) and `unwound
// symbols add|serve`, which fills that store and serves it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/offline"
	"github.com/unwound-dev/unwound/testkit/testbin"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestSymbolizeCommand runs `unwound symbolize` on a fixture crash's
// report with the program's debug file in a build-id tree.
func TestSymbolizeCommand(t *testing.T) {
	arch, b := nativeCrash(t)
	tmp := t.TempDir()
	r, rep := nullwriteReport(t, arch, b, tmp)

	var m report.Module
	for _, mm := range r.Modules {
		if mm.Path == b.Stripped() {
			m = mm
		}
	}
	id := m.BuildID
	dbg := filepath.Join(tmp, "debug")
	os.MkdirAll(filepath.Join(dbg, ".build-id", id[:2]), 0o755)
	run(t, "objcopy", "--only-keep-debug", b.Unstripped(), filepath.Join(dbg, ".build-id", id[:2], id[2:]+".debug"))

	var text bytes.Buffer
	if err := symbolizeCmd([]string{"--debug-dir", dbg, "--sysroot", fixture.Sysroot(arch), rep}, &text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	// A qemu-user core (where the host's core_pattern writes no files)
	// carries no si_code.
	for _, want := range []string{
		strings.TrimSpace(fmt.Sprintf("pid %d (crash) SIGSEGV %s", r.PID, r.Signal.CodeName)),
		"(crashed):\n#0  0x",
		fmt.Sprintf(" in null_write at crash.c:%d [context, high]\n#1  0x", crashLine(t, "null_write")),
		fmt.Sprintf(" in nw3 at crash.c:%d [cfi, high]\n", crashLine(t, "nw3")),
		" in main at crash.c:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}

	var js bytes.Buffer
	if err := symbolizeCmd([]string{"--format", "json", "--debug-dir", dbg, "--sysroot", fixture.Sysroot(arch), rep}, &js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID      string `json:"id"`
		Threads []struct {
			Crashed bool `json:"crashed"`
			Frames  []struct {
				PC        string `json:"pc"`
				Addr      string `json:"addr"`
				Locations []struct {
					Function, File string
					Line           int
				} `json:"locations"`
			} `json:"frames"`
		} `json:"threads"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatalf("JSON: %v\n%s", err, js.String())
	}
	if got.ID != r.ID || len(got.Threads) == 0 || len(got.Threads[0].Frames) == 0 {
		t.Fatalf("JSON: %s", js.String())
	}
	f0 := got.Threads[0].Frames[0]
	if len(f0.Locations) == 0 || f0.Locations[0].Function != "null_write" || f0.Locations[0].Line != crashLine(t, "null_write") || !strings.HasSuffix(f0.Locations[0].File, "crash.c") {
		t.Errorf("frame 0: %+v", f0)
	}

	// DEBUGINFOD_URLS: the same debug file from a debuginfod server (a
	// real one on loopback) instead of --debug-dir, cached where
	// DEBUGINFOD_CACHE_PATH says.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/buildid/"+strings.ToLower(id)+"/debuginfo" {
			http.NotFound(w, req)
			return
		}
		http.ServeFile(w, req, filepath.Join(dbg, ".build-id", id[:2], id[2:]+".debug"))
	}))
	defer srv.Close()
	cache := filepath.Join(tmp, "debuginfod")
	t.Setenv("DEBUGINFOD_URLS", srv.URL)
	t.Setenv("DEBUGINFOD_CACHE_PATH", cache)
	text.Reset()
	if err := symbolizeCmd([]string{"--sysroot", fixture.Sysroot(arch), rep}, &text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), fmt.Sprintf(" in null_write at crash.c:%d [context, high]\n", crashLine(t, "null_write"))) {
		t.Errorf("with DEBUGINFOD_URLS:\n%s", text.String())
	}
	if _, err := os.Stat(filepath.Join(cache, strings.ToLower(id), "debuginfo")); err != nil {
		t.Errorf("not cached: %v", err)
	}

	// Bad arguments are errors, not crashes.
	if err := symbolizeCmd([]string{"--format", "yaml", rep}, io.Discard); err == nil {
		t.Error("unknown format accepted")
	}
	if err := symbolizeCmd(nil, io.Discard); err == nil {
		t.Error("no files accepted")
	}
}

// crashLine is the line of testdata/crash/crash.c that defines fn (its
// body is on that line): what the symbolizer names for a PC in fn, so that
// edits to the crash programs do not break the expected output.
func crashLine(t *testing.T, fn string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "crash", "crash.c"))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, " "+fn+"(int v) {") {
			return i + 1
		}
	}
	t.Fatalf("crash.c defines no %s", fn)
	return 0
}

// nativeCrash is the fixture crash program built for this machine's
// architecture, for the tests that symbolize its crash with objcopy's
// help; they skip in -short or without objcopy.
func nativeCrash(t *testing.T) (arch string, b fixture.Binary) {
	t.Helper()
	if testing.Short() {
		t.Skip("fixtures: not in -short")
	}
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy not installed")
	}
	arch = "x86_64"
	if fixture.Native("aarch64") {
		arch = "aarch64"
	}
	return arch, fixture.Binary{Arch: arch, Variant: "O2-dynamic", Prog: "crash", Dir: fixture.Build(t, arch)}
}

// nullwriteReport unwinds b's nullwrite core offline and stores the
// report in dir as a queue entry would be; it returns the report and the
// file's path.
func nullwriteReport(t *testing.T, arch string, b fixture.Binary, dir string) (*report.Report, string) {
	t.Helper()
	core, kernel := fixture.Core(t, b, "nullwrite")
	exe := ""
	if !kernel {
		exe = b.Stripped()
	}
	r := offline.Report(t, core, fixture.Sysroot(arch), exe)
	rep := filepath.Join(dir, "0000000001-798a81a1.json.zst")
	writeReport(t, r, rep)
	return r, rep
}

// TestSymbolsAddAndSymbolize runs `unwound symbols add --dir` on a
// debuglink pair of a fixture program (stripped file, .debug file) and a
// file without a build ID, checks what it prints, that a second add adds
// nothing, then `unwound symbolize --dir` names the crash's frames from
// the collector's store, and `unwound symbols serve` serves the file.
func TestSymbolsAddAndSymbolize(t *testing.T) {
	arch, b := nativeCrash(t)
	tmp := t.TempDir()
	tree := filepath.Join(tmp, "tree")
	os.MkdirAll(filepath.Join(tree, "usr/bin/.debug"), 0o755)
	dbg := filepath.Join(tree, "usr/bin/.debug/crash")
	for _, args := range [][]string{
		{"--only-keep-debug", b.Unstripped(), dbg},
		{"--strip-all", "--add-gnu-debuglink=" + dbg, b.Unstripped(), filepath.Join(tree, "usr/bin/crash")},
		{"--remove-section=.note.gnu.build-id", b.Stripped(), filepath.Join(tree, "usr/bin/noid")},
	} {
		run(t, "objcopy", args...)
	}
	os.WriteFile(filepath.Join(tree, "README"), []byte("not ELF"), 0o644)
	src := filepath.Join(tree, "obj.c")
	os.WriteFile(src, []byte("int f(void) { return 1; }\n"), 0o644)
	run(t, "gcc", "-g", "-c", "-o", filepath.Join(tree, "obj.o"), src)
	collector := filepath.Join(tmp, "collector")

	var out bytes.Buffer
	if err := symbolsCmd([]string{"add", "--dir", collector, tree}, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("symbols add:\n%s", out.String())
	for _, want := range []string{"added   ", "debuginfo  " + dbg, "executable " + filepath.Join(tree, "usr/bin/crash"),
		"skipped " + filepath.Join(tree, "usr/bin/noid") + ": no build id", "2 added, 0 already in " + filepath.Join(collector, "symbols") + ", 1 skipped, 2 files not ELF, 1 object files without a build id"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("symbols add output lacks %q", want)
		}
	}
	out.Reset()
	if err := symbolsCmd([]string{"add", "--store", filepath.Join(collector, "symbols"), tree}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "0 added, 2 already in") {
		t.Errorf("second add:\n%s", out.String())
	}

	r, rep := nullwriteReport(t, arch, b, tmp)
	var text bytes.Buffer
	if err := symbolizeCmd([]string{"--dir", collector, "--sysroot", fixture.Sysroot(arch), rep}, &text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf(" in null_write at crash.c:%d [context, high]", crashLine(t, "null_write")), fmt.Sprintf(" in nw3 at crash.c:%d [cfi, high]", crashLine(t, "nw3"))} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("symbolize --dir lacks %q:\n%s", want, text.String())
		}
	}

	// symbols serve, as a process.
	tool := testbin.Build(t, "unwound", "")
	srv := testbin.Serve(t, tool, "symbols", "serve", "--dir", collector, "--listen", "127.0.0.1:0")
	var id string
	for _, m := range r.Modules {
		if m.Path == b.Stripped() {
			id = m.BuildID
		}
	}
	want, _ := os.ReadFile(dbg)
	if got := get(t, srv.URL+"/buildid/"+id+"/debuginfo", ""); !bytes.Equal(got, want) {
		t.Errorf("symbols serve: GET debuginfo: %d bytes, want the %d bytes of %s", len(got), len(want), dbg)
	}

	// unwound serve mounts the collector's store at /buildid/, beside
	// the receiver, behind its token.
	col := testbin.Collector(t, "--dir", collector, "--token", "sekrit")
	if got := get(t, col.URL+"/buildid/"+id+"/debuginfo", "sekrit"); !bytes.Equal(got, want) {
		t.Errorf("serve: GET debuginfo: %d bytes", len(got))
	}
	z, _ := os.ReadFile(rep)
	if resp, _ := testutil.Request(t, nil, "POST", col.URL+"/upload", "sekrit", z); resp.StatusCode != 201 {
		t.Errorf("serve: POST a report: %d, want 201", resp.StatusCode)
	}

	// unwound symbolize with no store of its own, through the collector's
	// debuginfod and its token.
	headers := filepath.Join(tmp, "headers")
	os.WriteFile(headers, []byte("Authorization: Bearer sekrit\n"), 0o600)
	t.Setenv("DEBUGINFOD_URLS", col.URL)
	t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(tmp, "dcache"))
	t.Setenv("DEBUGINFOD_HEADERS_FILE", headers)
	text.Reset()
	if err := symbolizeCmd([]string{"--sysroot", fixture.Sysroot(arch), rep}, &text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), fmt.Sprintf(" in nw3 at crash.c:%d [cfi, high]", crashLine(t, "nw3"))) || !strings.Contains(text.String(), "debug file fetched from "+col.URL) {
		t.Errorf("symbolize through the collector's debuginfod:\n%s", text.String())
	}
}
