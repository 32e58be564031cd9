package symstore

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/labcore"
	"github.com/unwound-dev/unwound/testkit/offline"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

func copyTo(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(from, to); err != nil {
		t.Fatal(err)
	}
}

func buildID(t *testing.T, p string) string {
	t.Helper()
	fi, err := symbolize.Inspect(p)
	if err != nil || fi.BuildID == "" {
		t.Fatalf("%s: no build id (%v)", p, err)
	}
	return fi.BuildID
}

// yoctoTree lays out a recipe's packages-split as Yocto's do_package
// leaves it (PACKAGE_DEBUG_SPLIT_STYLE ".debug"): the stripped program
// with a .gnu_debuglink in PN, its debug file in PN-dbg's .debug/, both
// made by the real objcopy from a cross-compiled fixture.
func yoctoTree(t *testing.T, root, objcopy, unstripped, prog string) {
	t.Helper()
	ps := filepath.Join(root, "tmp/work/cortexa57-poky-linux", prog, "1.0-r0/packages-split")
	dbg := filepath.Join(ps, prog+"-dbg/usr/bin/.debug", prog)
	bin := filepath.Join(ps, prog, "usr/bin", prog)
	os.MkdirAll(filepath.Dir(dbg), 0o755)
	os.MkdirAll(filepath.Dir(bin), 0o755)
	testutil.Run(t, objcopy, "--only-keep-debug", unstripped, dbg)
	testutil.Run(t, objcopy, "--strip-all", "--add-gnu-debuglink="+dbg, unstripped, bin)
	os.WriteFile(filepath.Join(ps, prog, "usr/bin/script.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(root, "tmp/work/cortexa57-poky-linux", prog, "1.0-r0/temp"), 0o755)
	os.WriteFile(filepath.Join(root, "tmp/work/cortexa57-poky-linux", prog, "1.0-r0/temp/log.do_package"), []byte("log"), 0o644)
}

// buildrootTree lays out a Buildroot output/: the unstripped object in
// build/PKG-VERSION/, the stripped one in target/, staging as a link to
// host/TUPLE/sysroot.
func buildrootTree(t *testing.T, root, strip, unstripped, prog string) {
	t.Helper()
	copyTo(t, unstripped, filepath.Join(root, "output/build", prog+"-1.0", prog))
	os.WriteFile(filepath.Join(root, "output/build", prog+"-1.0", prog+".c"), []byte("int main;"), 0o644)
	target := filepath.Join(root, "output/target/usr/bin", prog)
	os.MkdirAll(filepath.Dir(target), 0o755)
	testutil.Run(t, strip, "-o", target, unstripped)
	sysroot := filepath.Join(root, "output/host/aarch64-buildroot-linux-gnu/sysroot")
	os.MkdirAll(filepath.Join(sysroot, "usr/lib"), 0o755)
	os.Symlink(sysroot, filepath.Join(root, "output/staging"))
}

// TestAddYoctoAndBuildroot fills a store from a lab Yocto build and a lab
// Buildroot output/ made of the repo's cross-compiled aarch64 fixtures,
// checks the build-id tree, what was skipped and why, that a second add
// changes nothing, and that real crash reports of those programs (real
// cores, the handler's offline mode) symbolize from the store with every
// frame named. (host/symbolize's tests compare the symbolizer with
// addr2line and gdb on the same build-id trees.)
func TestAddYoctoAndBuildroot(t *testing.T) {
	if testing.Short() {
		t.Skip("fixtures: not in -short")
	}
	const arch = "aarch64"
	testutil.Need(t, "aarch64-linux-gnu-objcopy", "aarch64-linux-gnu-strip", "addr2line")
	fx := fixture.Build(t, arch)
	// Static programs: their libc is theirs, so the store holds every
	// frame's debug file (the cross sysroot's libc has no symbols).
	crash := fixture.Binary{Arch: arch, Variant: "O2-static", Prog: "crash", Dir: fx}
	crashxx := fixture.Binary{Arch: arch, Variant: "O0-static", Prog: "crashxx", Dir: fx}
	work := t.TempDir()
	yoctoTree(t, filepath.Join(work, "poky/build"), "aarch64-linux-gnu-objcopy", crash.Unstripped(), "crash")
	buildrootTree(t, filepath.Join(work, "br"), "aarch64-linux-gnu-strip", crashxx.Unstripped(), "crashxx")
	// A file without a build ID.
	testutil.Run(t, "aarch64-linux-gnu-objcopy", "--remove-section=.note.gnu.build-id", crash.Stripped(), filepath.Join(work, "br/output/target/usr/bin/noid"))

	st, err := Open(filepath.Join(work, "collector/symbols"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Add([]string{filepath.Join(work, "poky/build"), filepath.Join(work, "br/output")})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range res.Layouts {
		t.Log("layout", l)
	}
	if len(res.Layouts) != 2 {
		t.Errorf("layouts %v, want Yocto and Buildroot", res.Layouts)
	}
	idC, idX := buildID(t, crash.Unstripped()), buildID(t, crashxx.Unstripped())
	for _, w := range []struct{ id, kind string }{{idC, DebugInfo}, {idC, Executable}, {idX, DebugInfo}, {idX, Executable}} {
		if st.Lookup(w.id, w.kind) == "" {
			t.Errorf("%s %s not in the store", w.id, w.kind)
		}
	}
	if fi, _ := symbolize.Inspect(st.Lookup(idC, DebugInfo)); !fi.HasDWARF {
		t.Error("the Yocto program's stored debug file has no DWARF")
	}
	if fi, _ := symbolize.Inspect(st.Lookup(idC, Executable)); fi.HasDWARF || !fi.HasCode {
		t.Error("the Yocto program's stored executable is not its stripped file")
	}
	skipped := map[string]string{}
	for _, s := range res.Skipped {
		skipped[filepath.Base(s.Path)] = s.Why
	}
	if !strings.Contains(skipped["noid"], "no build id") {
		t.Errorf("noid: skipped %q, want no build id", skipped["noid"])
	}
	if res.NotELF < 2 {
		t.Errorf("%d files not ELF, want the script and the source", res.NotELF)
	}
	gen := st.Generation()
	if gen == 0 {
		t.Error("generation not written")
	}
	again, err := st.Add([]string{filepath.Join(work, "poky/build"), filepath.Join(work, "br/output")})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range again.Found {
		if f.New {
			t.Errorf("second add stored %s again", f.From)
		}
	}
	if st.Generation() != gen {
		t.Error("a second add of the same files raised the generation")
	}

	// The programs' real crash reports, symbolized from the store.
	for _, c := range []struct {
		b        fixture.Binary
		scenario string
	}{{crash, "abort"}, {crash, "recursion"}, {crashxx, "throw"}} {
		r := offline.Fixture(t, c.b, c.scenario, fixture.Sysroot(arch))
		s := symbolize.New(symbolize.Options{DebugDirs: []string{st.Dir}, Sysroot: fixture.Sysroot(arch)})
		out := s.Symbolize(r)
		s.Close()
		frames := 0
		for _, th := range out.Threads {
			for _, f := range th.Frames {
				frames++
				if len(f.Locations) == 0 || f.Locations[len(f.Locations)-1].Function == "" {
					t.Errorf("%s %s: frame %v unnamed: %s", c.b.Prog, c.scenario, f.PC, f.Error)
				}
			}
		}
		fromStore := 0
		for _, m := range out.Modules {
			if m.DebugHow == "build-id" && strings.HasPrefix(m.DebugFile, st.Dir) {
				fromStore++
			}
		}
		if fromStore == 0 {
			t.Errorf("%s %s: no module's debug file came from the store", c.b.Prog, c.scenario)
		}
		t.Logf("%s %s: %d frames, every one named", c.b.Prog, c.scenario, frames)
	}
}

// TestLabReportsFromStore symbolizes reports of real riscv64 kernel
// cores (the QEMU lab's minimal kernel; the cores are cached beside the
// fixtures, shared with host/symbolize's tests) from a store filled from
// lab Yocto and Buildroot trees of the static programs: every frame named,
// with lines from the store's DWARF (but the vDSO's signal trampoline,
// which no file on the host holds).
func TestLabReportsFromStore(t *testing.T) {
	if testing.Short() {
		t.Skip("QEMU lab: not in -short")
	}
	const arch = "riscv64"
	testutil.Need(t, "riscv64-linux-gnu-objcopy", "riscv64-linux-gnu-strip")
	fx := fixture.Build(t, arch)
	crashes := []labcore.Crash{
		{Variant: "O2-static", Prog: "crash", Scenario: "recursion"},
		{Variant: "O2-static", Prog: "crash", Scenario: "abort"},
		{Variant: "O0-static", Prog: "crash", Scenario: "sighandler"},
		{Variant: "O0-static", Prog: "crashxx", Scenario: "throw"},
	}
	cores, root := labcore.Cores(t, arch, fx, crashes)
	work := t.TempDir()
	o2 := fixture.Binary{Arch: arch, Variant: "O2-static", Prog: "crash", Dir: fx}
	o0 := fixture.Binary{Arch: arch, Variant: "O0-static", Prog: "crash", Dir: fx}
	xx := fixture.Binary{Arch: arch, Variant: "O0-static", Prog: "crashxx", Dir: fx}
	yoctoTree(t, filepath.Join(work, "build"), "riscv64-linux-gnu-objcopy", o2.Unstripped(), "crash")
	yoctoTree(t, filepath.Join(work, "build"), "riscv64-linux-gnu-objcopy", o0.Unstripped(), "crash-o0")
	buildrootTree(t, filepath.Join(work, "br"), "riscv64-linux-gnu-strip", xx.Unstripped(), "crashxx")
	st, err := Open(filepath.Join(work, "store"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Add([]string{filepath.Join(work, "build"), filepath.Join(work, "br/output")}); err != nil {
		t.Fatal(err)
	}
	for _, c := range crashes {
		r := offline.Report(t, cores[c.Name()], root, "")
		s := symbolize.New(symbolize.Options{DebugDirs: []string{st.Dir}, Sysroot: root})
		out := s.Symbolize(r)
		s.Close()
		frames, lines, vdso := 0, 0, 0
		for _, th := range out.Threads {
			for _, f := range th.Frames {
				frames++
				if f.Module >= 0 && strings.HasPrefix(r.Modules[f.Module].Path, "[") {
					// The kernel's vDSO (the signal trampoline): no file
					// on the host holds it unless the kernel build's
					// vdso.so.dbg is added.
					vdso++
					continue
				}
				if len(f.Locations) == 0 || f.Locations[len(f.Locations)-1].Function == "" {
					t.Errorf("%s: frame %v unnamed: %s", c.Name(), f.PC, f.Error)
				} else if f.Locations[0].Line > 0 {
					lines++
				}
			}
		}
		for _, m := range out.Modules {
			if strings.HasPrefix(m.Path, "[") {
				continue
			}
			if m.DebugHow != "build-id" || !strings.HasPrefix(m.DebugFile, st.Dir) {
				t.Errorf("%s: module %s: debug file %q (%s), not from the store", c.Name(), m.Path, m.DebugFile, m.DebugHow)
			}
		}
		t.Logf("%s: %d frames, every one named (%d in the vDSO aside), %d with a line", c.Name(), frames, vdso, lines)
	}
}

// TestDebuginfodServer checks the protocol: GET and HEAD with
// Content-Length, 404 for unknown IDs and other paths, 405 for other
// methods, and the bearer token.
func TestDebuginfodServer(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Need(t, "gcc")
	self := filepath.Join(t.TempDir(), "prog")
	src := self + ".c"
	os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644)
	testutil.Run(t, "gcc", "-g", "-Wl,--build-id", "-o", self, src)
	id := buildID(t, self)
	link := filepath.Join(t.TempDir(), "prog-link")
	os.Symlink(self, link)
	res, err := st.Add([]string{link})
	if err != nil || len(res.Found) == 0 {
		t.Fatalf("add: %v %v", err, res)
	}
	if fi, err := os.Lstat(st.Lookup(id, DebugInfo)); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("added through a symbolic link: the store holds %v (%v), want the file", fi, err)
	}
	srv := httptest.NewServer(st.Handler("sekrit"))
	defer srv.Close()
	want, _ := os.ReadFile(self)
	req := func(method, path, token string) (*http.Response, []byte) {
		return testutil.Request(t, nil, method, srv.URL+path, token, nil)
	}
	for _, kind := range []string{"debuginfo", "executable"} {
		resp, body := req("GET", "/buildid/"+strings.ToUpper(id)+"/"+kind, "sekrit")
		if resp.StatusCode != 200 || !bytes.Equal(body, want) || resp.ContentLength != int64(len(want)) {
			t.Errorf("GET %s: %d, %d bytes, Content-Length %d", kind, resp.StatusCode, len(body), resp.ContentLength)
		}
		resp, body = req("HEAD", "/buildid/"+id+"/"+kind, "sekrit")
		if resp.StatusCode != 200 || len(body) != 0 || resp.ContentLength != int64(len(want)) {
			t.Errorf("HEAD %s: %d, Content-Length %d", kind, resp.StatusCode, resp.ContentLength)
		}
	}
	for path, code := range map[string]int{
		"/buildid/" + id + "/source/a.c":    404,
		"/buildid/" + id + "/section/.text": 404,
		"/buildid/00112233/debuginfo":       404,
		"/buildid/../../etc/debuginfo":      404,
		"/buildid/xyz/debuginfo":            404,
		"/metrics":                          404,
	} {
		if resp, _ := req("GET", path, "sekrit"); resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
		}
	}
	if resp, _ := req("GET", "/buildid/"+id+"/debuginfo", ""); resp.StatusCode != 401 {
		t.Errorf("no token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := req("GET", "/buildid/"+id+"/debuginfo", "wrong"); resp.StatusCode != 401 {
		t.Errorf("wrong token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := req("POST", "/buildid/"+id+"/debuginfo", "sekrit"); resp.StatusCode != 405 {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

// TestGDBFetchesFromStore runs the real gdb-multiarch with DEBUGINFOD_URLS
// pointing at the store's server, behind a bearer token that gdb's
// libdebuginfod sends from DEBUGINFOD_HEADERS_FILE, on a stripped lab
// program: gdb fetches its debug file by build ID and names a function
// from its DWARF.
func TestGDBFetchesFromStore(t *testing.T) {
	if testing.Short() {
		t.Skip("fixtures: not in -short")
	}
	testutil.Need(t, "gdb-multiarch")
	const arch = "aarch64"
	fx := fixture.Build(t, arch)
	b := fixture.Binary{Arch: arch, Variant: "O2-dynamic", Prog: "crash", Dir: fx}
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Add([]string{b.Unstripped()}); err != nil {
		t.Fatal(err)
	}
	id := buildID(t, b.Unstripped())
	var mu sync.Mutex
	var asked []string
	h := st.Handler("sekrit")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.Path)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	cache := t.TempDir()
	// The token, as debuginfod clients send headers: a file of them.
	headers := filepath.Join(cache, "headers")
	os.WriteFile(headers, []byte("Authorization: Bearer sekrit\n"), 0o600)
	cmd := exec.Command("gdb-multiarch", "-nx", "-batch",
		"-iex", "set debuginfod enabled on",
		"-ex", "info line main",
		"-ex", "info functions ^nw",
		b.Stripped())
	cmd.Env = append(os.Environ(), "DEBUGINFOD_URLS="+srv.URL, "XDG_CACHE_HOME="+cache, "DEBUGINFOD_CACHE_PATH="+filepath.Join(cache, "debuginfod_client"), "HOME="+cache, "DEBUGINFOD_HEADERS_FILE="+headers)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, out)
	}
	t.Logf("gdb:\n%s", out)
	mu.Lock()
	defer mu.Unlock()
	if !contains(asked, "GET /buildid/"+id+"/debuginfo") {
		t.Errorf("gdb asked %v, not for the debuginfo of %s", asked, id)
	}
	if !strings.Contains(string(out), "crash.c") || !strings.Contains(string(out), "nw1") {
		t.Errorf("gdb named no function from the fetched DWARF")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
