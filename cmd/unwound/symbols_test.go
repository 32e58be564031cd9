package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/testkit/fixture"
)

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
		if out, err := exec.Command("objcopy", args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, out)
		}
	}
	os.WriteFile(filepath.Join(tree, "README"), []byte("not ELF"), 0o644)
	src := filepath.Join(tree, "obj.c")
	os.WriteFile(src, []byte("int f(void) { return 1; }\n"), 0o644)
	if out, err := exec.Command("gcc", "-g", "-c", "-o", filepath.Join(tree, "obj.o"), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
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
	tool := filepath.Join(tmp, "unwound")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	srv := exec.Command(tool, "symbols", "serve", "--dir", collector, "--listen", addr)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var id string
	for _, m := range r.Modules {
		if m.Path == b.Stripped() {
			id = m.BuildID
		}
	}
	want, _ := os.ReadFile(dbg)
	var resp *http.Response
	var err error
	for i := 0; i < 100; i++ {
		if resp, err = http.Get(fmt.Sprintf("http://%s/buildid/%s/debuginfo", addr, id)); err == nil {
			break
		}
		sleep()
	}
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, want) {
		t.Errorf("symbols serve: GET debuginfo: %d, %d bytes, want the %d bytes of %s", resp.StatusCode, len(got), len(want), dbg)
	}

	// unwound serve mounts the collector's store at /buildid/, beside
	// the receiver, behind its token.
	addr = freeAddr(t)
	col := exec.Command(tool, "serve", "--dir", collector, "--listen", addr, "--token", "sekrit")
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { col.Process.Kill(); col.Wait() }()
	get := func(path string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer sekrit")
		var resp *http.Response
		var err error
		for i := 0; i < 100; i++ {
			if resp, err = http.DefaultClient.Do(req); err == nil {
				break
			}
			sleep()
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, got = get("/buildid/" + id + "/debuginfo")
	if resp.StatusCode != 200 || !bytes.Equal(got, want) {
		t.Errorf("serve: GET debuginfo: %d, %d bytes", resp.StatusCode, len(got))
	}
	z, _ := os.ReadFile(rep)
	req, _ := http.NewRequest("POST", "http://"+addr+"/upload", bytes.NewReader(z))
	req.Header.Set("Authorization", "Bearer sekrit")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Errorf("serve: POST a report: %d, want 201", resp.StatusCode)
	}

	// unwound symbolize with no store of its own, through the collector's
	// debuginfod and its token.
	headers := filepath.Join(tmp, "headers")
	os.WriteFile(headers, []byte("Authorization: Bearer sekrit\n"), 0o600)
	t.Setenv("DEBUGINFOD_URLS", "http://"+addr)
	t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(tmp, "dcache"))
	t.Setenv("DEBUGINFOD_HEADERS_FILE", headers)
	text.Reset()
	if err := symbolizeCmd([]string{"--sysroot", fixture.Sysroot(arch), rep}, &text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), fmt.Sprintf(" in nw3 at crash.c:%d [cfi, high]", crashLine(t, "nw3"))) || !strings.Contains(text.String(), "debug file fetched from http://"+addr) {
		t.Errorf("symbolize through the collector's debuginfod:\n%s", text.String())
	}
}

// freeAddr is a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func sleep() { time.Sleep(50 * time.Millisecond) }
