package minidebuginfo

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

const (
	bbclass      = "../../recipes/classes/unwound-minidebuginfo.bbclass"
	targetRecipe = "../../recipes/recipes-support/unwound/unwound_0.1.bb"
	nativeRecipe = "../../recipes/recipes-devtools/unwound-tools/unwound-tools-native_0.1.bb"
)

// The native tool's recipe must fetch and license exactly what the target
// recipe does.
func TestYoctoRecipesAgree(t *testing.T) {
	vars := func(path string) map[string]string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// name = "value", values continued with a backslash.
		re := regexp.MustCompile(`(?m)^(LICENSE|LIC_FILES_CHKSUM|GO_IMPORT|UNWOUND_SRC_SUBDIR|SRC_URI(\[sha256sum\])?) = "((?:[^"\\]|\\\n|\\.)*)"`)
		m := map[string]string{}
		for _, g := range re.FindAllStringSubmatch(string(b), -1) {
			m[g[1]] = g[3]
		}
		return m
	}
	target, native := vars(targetRecipe), vars(nativeRecipe)
	for _, k := range []string{"LICENSE", "LIC_FILES_CHKSUM", "GO_IMPORT", "UNWOUND_SRC_SUBDIR", "SRC_URI", "SRC_URI[sha256sum]"} {
		if target[k] == "" {
			t.Errorf("%s: no %s", targetRecipe, k)
		}
		if target[k] != native[k] {
			t.Errorf("%s differs:\n%s\n%s", k, target[k], native[k])
		}
	}
}

// The class's Python (the functions do_package calls) run on a package
// tree laid out as poky's split_and_strip_files leaves it, with real cross
// binaries and the real tool: stripped files get our MiniDebugInfo, hard
// links stay links, debug files stay as they are, with and without poky's
// own MiniDebugInfo already in place, for both debug split styles.
func TestYoctoClassOnAPackageTree(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	full, stripped := build(t, "arm-linux-gnueabihf-")
	tool := filepath.Join(t.TempDir(), "unwound")
	testutil.Run(t, "go", "build", "-o", tool, "../../cmd/unwound")
	class, err := os.ReadFile(bbclass)
	if err != nil {
		t.Fatal(err)
	}
	// The plain Python functions of the class (its def blocks).
	i := bytes.Index(class, []byte("def unwound_mdi_pairs"))
	j := bytes.Index(class, []byte("python unwound_minidebuginfo ()"))
	if i < 0 || j < i {
		t.Fatal("the class has no unwound_mdi_pairs / unwound_minidebuginfo")
	}
	funcs := string(class[i:j])

	styles := map[string]map[string]string{
		// oe.package.package_debug_vars: ".debug" (the default) and
		// "debug-file-directory".
		"dot-debug": {"append": "", "staticappend": "", "dir": "/.debug", "staticdir": "/.debug-static", "libdir": "", "staticlibdir": "", "srcdir": "/usr/src/debug"},
		"debug-file-directory": {"append": ".debug", "staticappend": "", "dir": "", "staticdir": "",
			"libdir": "/usr/lib/debug", "staticlibdir": "/usr/lib/debug-static", "srcdir": "/usr/src/debug"},
	}
	for name, dv := range styles {
		for _, poky := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "+poky-minidebuginfo"}[poky], func(t *testing.T) {
				pkgd := t.TempDir()
				prog := filepath.Join(pkgd, "usr/bin/prog")
				link := filepath.Join(pkgd, "usr/sbin/prog-link")
				debug := pkgd + dv["libdir"] + "/usr/bin" + dv["dir"] + "/prog" + dv["append"]
				for _, d := range []string{filepath.Dir(prog), filepath.Dir(link), filepath.Dir(debug)} {
					os.MkdirAll(d, 0o755)
				}
				testutil.CopyFile(t, stripped, prog)
				testutil.Run(t, "arm-linux-gnueabihf-objcopy", "--only-keep-debug", full, debug)
				if poky {
					if _, err := Make(Options{Unstripped: debug, Stripped: prog, SymbolsOnly: true}); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Link(prog, link); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(pkgd, "usr/bin/script"), []byte("#!/bin/sh\n"), 0o755)
				os.Symlink("prog", filepath.Join(pkgd, "usr/bin/prog-symlink"))
				debugBefore, _ := os.ReadFile(debug)

				dvJSON, _ := json.Marshal(dv)
				harness := funcs + `
import json, sys
dv = json.loads(sys.argv[2])
pairs = unwound_mdi_pairs(sys.argv[1], dv)
print(json.dumps({"pairs": pairs, "errors": unwound_mdi_run(pairs, sys.argv[3], sys.argv[4])}))
`
				cmd := exec.Command("python3", "-c", harness, pkgd, string(dvJSON), tool, "arm-linux-gnueabihf-objcopy")
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("python3: %v\n%s", err, out)
				}
				var res struct {
					Pairs  [][]string
					Errors []string
				}
				if err := json.Unmarshal(out, &res); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				if len(res.Errors) > 0 {
					t.Fatalf("errors: %v", res.Errors)
				}
				if len(res.Pairs) != 1 || res.Pairs[0][1] != debug {
					t.Fatalf("pairs %v, want the program (once, for two links) and %s", res.Pairs, debug)
				}
				check(t, full, prog, true)
				var a, b syscall.Stat_t
				syscall.Stat(prog, &a)
				syscall.Stat(link, &b)
				if a.Ino != b.Ino {
					t.Error("the hard link was broken")
				}
				if after, _ := os.ReadFile(debug); !bytes.Equal(after, debugBefore) {
					t.Error("the debug file changed")
				}
				if strings.Contains(string(out), "Traceback") {
					t.Error(string(out))
				}
			})
		}
	}
}
