package packaging

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/sysctl"
)

// layerDir is the Yocto layer in the repository.
const layerDir = "recipes"

// bitbake refuses to run as root: it runs as this unprivileged uid/gid
// (nobody), in a temporary directory it owns, removed when the test ends.
const bbUID = "65534"

// bbBuild is a fresh poky build directory with the layer added.
type bbBuild struct {
	work  string // owned by bbUID: poky/, recipes/, build/, locale/
	layer string
	n     int
}

// newYoctoBuild lays out poky (hard links to the cached, read-only tree),
// a copy of the layer, an en_US.UTF-8 locale compiled into the directory
// (bitbake insists on it; LOCPATH, so the host's locales stay as they
// are), then a build directory made by oe-init-build-env with no network.
func newYoctoBuild(t *testing.T, poky string) *bbBuild {
	t.Helper()
	work, err := os.MkdirTemp("", "unwound-yocto")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if out, err := exec.Command("cp", "-al", poky, filepath.Join(work, "poky")).CombinedOutput(); err != nil {
		t.Logf("cp -al: %v %s; copying", err, out)
		copyTree(t, poky, filepath.Join(work, "poky"))
	}
	b := &bbBuild{work: work, layer: filepath.Join(work, layerDir)}
	copyTree(t, filepath.Join(repoRoot(t), layerDir), b.layer)
	mkdir(t, filepath.Join(work, "locale"))
	if out, err := exec.Command("localedef", "-i", "en_US", "-f", "UTF-8", filepath.Join(work, "locale", "en_US.UTF-8")).CombinedOutput(); err != nil {
		t.Fatalf("localedef en_US.UTF-8: %v\n%s", err, out)
	}
	for _, d := range []string{work, b.layer, filepath.Join(work, "locale")} {
		if out, err := exec.Command("chown", "-R", bbUID+":"+bbUID, d).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v %s", err, out)
		}
	}
	out := b.run(t, nil, `cat >> conf/local.conf <<'EOF'
CONNECTIVITY_CHECK_URIS = ""
BB_NO_NETWORK = "1"
EOF
bitbake-layers add-layer `+b.layer+`
bitbake-layers show-layers`)
	if !regexp.MustCompile(`(?m)^unwound\s+` + regexp.QuoteMeta(b.layer) + `\s+6\s*$`).MatchString(out) {
		t.Fatalf("bitbake-layers show-layers does not list the layer as unwound, priority 6:\n%s", out)
	}
	return b
}

// run runs script as bbUID in the build directory (after
// oe-init-build-env), with env added, and returns its output.
func (b *bbBuild) run(t *testing.T, env []string, script string) string {
	t.Helper()
	b.n++
	path := filepath.Join(b.work, fmt.Sprintf("run-%d.sh", b.n))
	text := "set -e\ncd " + b.work + "\n. poky/oe-init-build-env build >/dev/null\n" +
		`export BB_ENV_PASSTHROUGH_ADDITIONS="$BB_ENV_PASSTHROUGH_ADDITIONS LOCPATH INIT_MANAGER"` + "\n" + script + "\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--reuid=" + bbUID, "--regid=" + bbUID, "--clear-groups", "env", "-i",
		"HOME=" + b.work, "LANG=en_US.UTF-8", "LC_ALL=en_US.UTF-8", "LOCPATH=" + filepath.Join(b.work, "locale"),
		"PATH=" + hostPath}, env...)
	cmd := exec.Command("setpriv", append(args, "/bin/bash", path)...)
	return runLogged(t, cmd)
}

// yoctoVariant is one configuration the recipe is evaluated (bitbake -e)
// and built in.
type yoctoVariant struct {
	machine, initManager string
	appendFeatures       string // DISTRO_FEATURES:append in a -R file
	wantInit             string
	target               recipeTarget
}

var yoctoVariants = []yoctoVariant{
	{"qemuarm64", "sysvinit", "", "sysvinit", recipeTarget{goarch: "arm64", machine: elf.EM_AARCH64}},
	{"qemuarm", "systemd", "", "systemd", recipeTarget{goarch: "arm", goarm: "7", machine: elf.EM_ARM}},
	// Both: systemd's files, no init script, so no update-rc.d.
	{"qemuriscv64", "systemd", "sysvinit", "systemd", recipeTarget{goarch: "riscv64", machine: elf.EM_RISCV}},
}

// TestYoctoRealTree runs poky scarthgap on the layer: bitbake-layers
// add-layer and show-layers, `bitbake -p` (0 errors, 0 warnings), the
// recipe's task flags (bitbake-getvar), then `bitbake -e` of the recipe for
// sysvinit, systemd, and both in DISTRO_FEATURES on three machines, and the
// recipe's own do_compile and do_install bodies as bitbake -e prints them,
// with the exported environment, Go 1.22.12 (what scarthgap ships) behind
// a cross wrapper made as go-cross.inc makes it and a native go as
// go-binary-native makes it: the installed tree, the binaries'
// architecture and the core_pattern line.
func TestYoctoRealTree(t *testing.T) {
	poky := buildsysTree(t, envPoky)
	if os.Getuid() != 0 {
		t.Skip("needs root to run bitbake as an unprivileged uid (setpriv)")
	}
	b := newYoctoBuild(t, poky)
	first := []string{"MACHINE=" + yoctoVariants[0].machine, "INIT_MANAGER=" + yoctoVariants[0].initManager}
	out := b.run(t, first, "bitbake -p 2>&1")
	t.Logf("bitbake -p: %s", lastLine(out, "Parsing of "))
	if !regexp.MustCompile(`Parsing of \d+ \.bb files complete .* 0 errors\.`).MatchString(out) ||
		regexp.MustCompile(`(?m)^(WARNING|ERROR):`).MatchString(out) {
		t.Errorf("bitbake -p: errors or warnings:\n%s", tail(out, 3000))
	}
	// Same configuration as the parse: bitbake-getvar reads its cache.
	cleandirs := b.run(t, first, "bitbake-getvar -r unwound --value -f cleandirs do_compile")
	for _, d := range []string{"/build/bin", "/build/pkg", "/build/unwound-bin"} {
		if !strings.Contains(cleandirs, d+" ") && !strings.HasSuffix(strings.TrimSpace(cleandirs), d) {
			t.Errorf("do_compile[cleandirs] = %q: no %s (go.bbclass's are kept, the recipe's added)", strings.TrimSpace(cleandirs), d)
		}
	}
	dist := distTree(t)
	root := goroot(t, "go1.22.12")
	recipe := filepath.Join(b.layer, "recipes-support/unwound/unwound_0.1.bb")
	for _, v := range yoctoVariants {
		t.Run(v.machine+"-"+v.initManager+v.appendFeatures, func(t *testing.T) {
			script := "bitbake -e -b " + recipe
			if v.appendFeatures != "" {
				conf := filepath.Join(b.work, "append-"+v.machine+".conf")
				if err := os.WriteFile(conf, []byte(`DISTRO_FEATURES:append = " `+v.appendFeatures+`"`+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				script = "bitbake -R " + conf + " -e -b " + recipe
			}
			e := b.run(t, []string{"MACHINE=" + v.machine, "INIT_MANAGER=" + v.initManager}, script)
			vars := bbEnvVars(e)
			features := " " + vars["DISTRO_FEATURES"] + " "
			for _, f := range []string{v.initManager, v.appendFeatures} {
				if f != "" && !strings.Contains(features, " "+f+" ") {
					t.Fatalf("DISTRO_FEATURES lacks %s: %s", f, features)
				}
			}
			if vars["UNWOUND_INIT"] != v.wantInit {
				t.Errorf("UNWOUND_INIT = %q, want %q (DISTRO_FEATURES %s)", vars["UNWOUND_INIT"], v.wantInit, features)
			}
			// The init classes follow UNWOUND_INIT: their postinst
			// functions show which were inherited.
			updatercd := strings.Contains(e, "\nupdatercd_postinst() {")
			systemd := strings.Contains(e, "\nsystemd_postinst() {")
			if updatercd != (v.wantInit == "sysvinit") || systemd != (v.wantInit == "systemd") {
				t.Errorf("inherits update-rc.d: %v, systemd: %v; want only the class for %s", updatercd, systemd, v.wantInit)
			}
			tg := v.target
			if tg.goarch != vars["TARGET_GOARCH"] || tg.goarm != vars["TARGET_GOARM"] {
				t.Fatalf("TARGET_GOARCH/GOARM = %s/%s, want %s/%s", vars["TARGET_GOARCH"], vars["TARGET_GOARM"], tg.goarch, tg.goarm)
			}
			yoctoTasks(t, e, vars, root, dist)
			d := vars["D"]
			if got, want := tree(t, d), installTree(v.wantInit, true); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("installed tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, bin := range []string{"unwound-handler", "unwound-uploader"} {
				checkBoardBinary(t, filepath.Join(d, "usr/bin", bin), tg)
			}
			conf := filepath.Join(d, "etc/sysctl.d/60-unwound.conf")
			if v.wantInit == "systemd" {
				conf = filepath.Join(d, "usr/lib/sysctl.d/60-unwound.conf")
			}
			kv := sysctlConf(t, conf)
			if want := "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml " + sysctl.PatternSpecifiers; kv["kernel.core_pattern"] != want {
				t.Errorf("core_pattern = %q, want %q", kv["kernel.core_pattern"], want)
			}
			src := filepath.Join(vars["S"], "src", vars["GO_IMPORT"])
			if _, err := os.Stat(filepath.Join(src, "build")); err == nil {
				t.Errorf("do_install wrote %s/build into ${S}", src)
			}
		})
	}
}

func lastLine(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return "(no line " + prefix + "...)"
}

// bbEnvVars reads the one-line VAR="value" assignments of bitbake -e.
func bbEnvVars(e string) map[string]string {
	v := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(?:export )?([A-Za-z0-9_]+)="(.*)"$`).FindAllStringSubmatch(e, -1) {
		v[m[1]] = m[2]
	}
	return v
}

// bbShell is what bitbake writes into a task's run script: the exported
// variables and the shell functions, as bitbake -e prints them.
func bbShell(e string) string {
	var sb strings.Builder
	lines := strings.Split(e, "\n")
	fn := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\(\) \{$`)
	// Variables with overrides in their names (GO386:x86) are not shell
	// names: bitbake leaves them out of run scripts too.
	exp := regexp.MustCompile(`^export [A-Za-z_][A-Za-z0-9_]*=`)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case exp.MatchString(l):
			sb.WriteString(l + "\n")
			for strings.HasSuffix(lines[i], "\\") && i+1 < len(lines) {
				i++
				sb.WriteString(lines[i] + "\n")
			}
		case fn.MatchString(l):
			for ; i < len(lines); i++ {
				sb.WriteString(lines[i] + "\n")
				if lines[i] == "}" {
					break
				}
			}
		}
	}
	return sb.String()
}

// yoctoTasks runs the recipe's do_compile and do_install as bitbake would
// after do_prepare_recipe_sysroot and do_unpack: the sources (the make
// dist tarball) in ${S}/src/${GO_IMPORT}; Go 1.22.12 staged as go-native
// (${STAGING_BINDIR_NATIVE}/go, go-binary-native's wrapper), go-cross
// (${STAGING_BINDIR_TOOLCHAIN}/${TARGET_PREFIX}go, go-cross.inc's wrapper,
// which exports the target's GOARCH) and go-runtime (${STAGING_LIBDIR}/go);
// the host tools linked into HOSTTOOLS_DIR as bitbake links them. Each
// task's cleandirs are emptied, its dirs made, and it runs from ${B} with
// nothing but the exported environment.
func yoctoTasks(t *testing.T, e string, v map[string]string, root, dist string) {
	t.Helper()
	for _, k := range []string{"S", "B", "D", "WORKDIR", "GO_IMPORT", "STAGING_BINDIR_NATIVE", "STAGING_LIBDIR_NATIVE",
		"STAGING_LIBDIR", "STAGING_BINDIR_TOOLCHAIN", "TARGET_PREFIX", "TARGET_SYS", "TARGET_GOARCH", "TARGET_GOOS",
		"HOSTTOOLS_DIR", "HOSTTOOLS", "GOTMPDIR"} {
		if v[k] == "" {
			t.Fatalf("bitbake -e: no %s", k)
		}
	}
	src := filepath.Join(v["S"], "src", v["GO_IMPORT"])
	mkdir(t, filepath.Dir(src))
	copyTree(t, dist, src)
	// go-binary-native and go-cross, as their recipes install them.
	mkdir(t, v["STAGING_BINDIR_NATIVE"])
	mkdir(t, v["STAGING_BINDIR_TOOLCHAIN"])
	mkdir(t, filepath.Join(v["STAGING_LIBDIR_NATIVE"], v["TARGET_SYS"]))
	mkdir(t, v["STAGING_LIBDIR"])
	for _, l := range []string{filepath.Join(v["STAGING_LIBDIR_NATIVE"], "go"),
		filepath.Join(v["STAGING_LIBDIR_NATIVE"], v["TARGET_SYS"], "go"), filepath.Join(v["STAGING_LIBDIR"], "go")} {
		if err := os.Symlink(root, l); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	writeExec(t, filepath.Join(v["STAGING_BINDIR_NATIVE"], "go"), "#!/bin/bash\nhere=`dirname $0`\n"+
		"export GOROOT=\"`readlink -f $here/../lib/go`\"\n$here/../lib/go/bin/go \"$@\"\n")
	writeExec(t, filepath.Join(v["STAGING_BINDIR_TOOLCHAIN"], v["TARGET_PREFIX"]+"go"), "#!/bin/bash\nhere=`dirname $0`\n"+
		"export GOARCH=\""+v["TARGET_GOARCH"]+"\"\nexport GOOS=\""+v["TARGET_GOOS"]+"\"\n"+
		"export GOARM=\"${GOARM:-"+v["TARGET_GOARM"]+"}\"\nexport GO386=\"${GO386:-}\"\nexport GOMIPS=\"${GOMIPS:-}\"\n"+
		"$here/../../lib/"+v["TARGET_SYS"]+"/go/bin/go \"$@\"\n")
	// HOSTTOOLS_DIR: bitbake links the listed host tools there; it is
	// the only host directory in the tasks' PATH (no host go).
	mkdir(t, v["HOSTTOOLS_DIR"])
	for _, tool := range strings.Fields(v["HOSTTOOLS"] + " " + v["HOSTTOOLS_NONFATAL"]) {
		for _, d := range filepath.SplitList(hostPath) {
			if p := filepath.Join(d, tool); fileIsExec(p) {
				os.Symlink(p, filepath.Join(v["HOSTTOOLS_DIR"], tool))
				break
			}
		}
	}
	shell := bbShell(e)
	for _, task := range []struct {
		name      string
		cleandirs []string
		dirs      []string
	}{
		// go.bbclass's cleandirs plus the recipe's; dirs: GOTMPDIR, B.
		{"do_compile", []string{v["B"] + "/bin", v["B"] + "/pkg", v["B"] + "/unwound-bin"}, []string{v["GOTMPDIR"], v["B"]}},
		{"do_install", []string{v["D"]}, []string{v["B"]}},
	} {
		for _, d := range task.cleandirs {
			os.RemoveAll(d)
			mkdir(t, d)
		}
		for _, d := range task.dirs {
			mkdir(t, d)
		}
		run := filepath.Join(v["WORKDIR"], "run."+task.name)
		writeExec(t, run, "#!/bin/sh\n\n"+shell+"\nset -e\ncd '"+v["B"]+"'\n"+task.name+"\n")
		cmd := exec.Command("/bin/sh", run)
		cmd.Env = []string{}
		out := runLogged(t, cmd)
		t.Logf("%s: ok (%d lines of output)", task.name, strings.Count(out, "\n"))
	}
}

func mkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeExec(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

func fileIsExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
