package packaging

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/sysctl"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// Unwound built the way Yocto and Buildroot build it: the recipes' own go
// build commands replayed for every target (TestRecipeBuilds), and the real
// build systems run on the layer and the external tree (TestYoctoRealTree,
// TestBuildrootRealTree). All of them check the board binaries with
// checkBoardBinary.

// The real build systems, run on the layer and the external tree: pristine
// release trees (a `git archive` of the release tag as a .tar.xz, or an
// unpacked directory) named by environment variables. `.ci/run` points them
// at ../shared/buildsys beside the repository; without them these tests
// skip with a line naming the variable.
const (
	envPoky        = "UNWOUND_POKY"           // poky scarthgap 5.0.15
	envBuildroot24 = "UNWOUND_BUILDROOT_2024" // Buildroot 2024.02.13 LTS
	envBuildroot25 = "UNWOUND_BUILDROOT_2025" // Buildroot 2025.02.16 LTS
)

// hostPath is the PATH the build systems run with: the distribution's
// python3 (with the modules they need, see scripts/deps.sh), never a
// per-user one (pyenv) that shadows it.
const hostPath = "/usr/bin:/bin:/usr/sbin:/sbin"

// buildsysTree returns the top directory of the release tree named by env
// (the single directory inside the archive, e.g. poky/ or buildroot/). A
// tarball is unpacked once into ~/.cache/unwound/buildsys/<name>-<sha256
// prefix>/ (temp directory + rename, so concurrent runs share it) and
// reused; the tests never write into it.
func buildsysTree(t *testing.T, env string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real build system")
	}
	src := os.Getenv(env)
	if src == "" {
		t.Skipf("%s is not set: set it to a release tarball or tree (see docs/packaging.md) to run this test", env)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatalf("%s=%s: %v", env, src, err)
	}
	dir := src
	if !st.IsDir() {
		dir = unpackCached(t, src)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 1 && entries[0].IsDir() {
		return filepath.Join(dir, entries[0].Name())
	}
	return dir
}

func unpackCached(t *testing.T, tarball string) string {
	t.Helper()
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(home, ".cache", "unwound", "buildsys")
	name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(tarball), ".xz"), ".tar")
	dir := filepath.Join(cache, name+"-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(cache, name+".tmp")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	testutil.Run(t, "tar", "-xJf", tarball, "-C", tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr != nil { // not another run's rename
			t.Fatal(err)
		}
	}
	return dir
}

// goroot returns the GOROOT of Go version v (go1.22.12, go1.26.3), fetched
// by the go command from the module proxy into the module cache.
func goroot(t *testing.T, v string) string {
	t.Helper()
	cmd := exec.Command("go", "env", "GOROOT")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+v)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOTOOLCHAIN=%s go env GOROOT: %v", v, err)
	}
	root := strings.TrimSpace(string(out))
	if b, err := os.ReadFile(filepath.Join(root, "VERSION")); err != nil || !strings.HasPrefix(string(b), v+"\n") {
		t.Fatalf("%s/VERSION: %q %v, want %s", root, b, err, v)
	}
	return root
}

// runLogged runs cmd and returns its combined output, failing the test
// with the output's tail when it fails.
func runLogged(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, tail(string(out), 4000))
	}
	return string(out)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

// copyTree copies src to dst (cp -a).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	testutil.Run(t, "cp", "-a", src, dst)
}

// The board binaries built exactly as the Yocto recipe and the Buildroot
// package build them, from the `make dist` tarball with -mod=vendor and no
// network, with the Go of Yocto scarthgap and Buildroot LTS (1.22.12), for
// every GOARCH/GOARM the recipes target; then checked static (no
// PT_INTERP, no dynamic section), of the right machine, with a GNU build
// ID, and not stripped (both build systems strip and split debug info
// themselves: Yocto into unwound-dbg, Buildroot at target-finalize).

// recipeTarget is one board the recipes build for: GOARCH/GOARM, the ELF
// machine, and what Yocto calls it (for go.bbclass's -r and -I flags).
type recipeTarget struct {
	goarch, goarm string
	machine       elf.Machine
	gotuple       string // TARGET_GOTUPLE
	loader        string // get_linuxloader (glibc)
	yoctoDynlink  bool   // goarch.bbclass: GO_DYNLINK = "1"
}

var recipeTargets = []recipeTarget{
	{"arm", "5", elf.EM_ARM, "linux_arm", "/lib/ld-linux.so.3", true},
	{"arm", "6", elf.EM_ARM, "linux_arm", "/lib/ld-linux-armhf.so.3", true},
	{"arm", "7", elf.EM_ARM, "linux_arm", "/lib/ld-linux-armhf.so.3", true},
	{"arm64", "", elf.EM_AARCH64, "linux_arm64", "/lib/ld-linux-aarch64.so.1", true},
	{"riscv64", "", elf.EM_RISCV, "linux_riscv64", "/lib/ld-linux-riscv64-lp64d.so.1", false},
	{"amd64", "", elf.EM_X86_64, "linux_amd64", "/lib64/ld-linux-x86-64.so.2", true},
}

// goEnv is the environment both build systems give go: the target, no
// network, vendored modules, Go 1.22.12 from the module cache.
func goEnv(tg recipeTarget, extra ...string) []string {
	env := append(os.Environ(), "GOOS=linux", "GOARCH="+tg.goarch, "GOARM="+tg.goarm,
		"GOTOOLCHAIN="+go122, "GOFLAGS=-mod=vendor", "GOPROXY=off", "GO111MODULE=on")
	return append(env, extra...)
}

const go122 = "go1.22.12"

// yoctoBuild runs the recipe's do_compile: go.bbclass's GOBUILDFLAGS with
// the recipe's GO_EXTRA_LDFLAGS and GOBUILDFLAGS:remove, from
// ${S}/src/${GO_IMPORT}, into ${B}/unwound-bin/.
func yoctoBuild(t *testing.T, src string, tg recipeTarget, out string) {
	t.Helper()
	_, pv, text := yoctoRecipe(t)
	v := bbVars(t, text)
	expand := strings.NewReplacer("${GO_IMPORT}", v["GO_IMPORT"], "${PV}", pv)
	rpath := ""
	if tg.yoctoDynlink {
		rpath = "-r /usr/lib/go/pkg/" + tg.gotuple + "_dynlink"
	}
	if v["GO_LINKSHARED"] != "" {
		t.Fatalf("the recipe sets GO_LINKSHARED = %q", v["GO_LINKSHARED"])
	}
	// GO_LDFLAGS of go.bbclass: rpath, link mode, loader, the recipe's
	// extra flags, and the C toolchain's flags for an external link.
	ldflags := strings.Join(strings.Fields(fmt.Sprintf("%s %s -I %s %s -extldflags '--sysroot=/sysroot -Wl,-O1 -Wl,--hash-style=gnu'",
		rpath, v["GO_LINKMODE"], tg.loader, expand.Replace(v["GO_EXTRA_LDFLAGS"]))), " ")
	flags := []string{"-p", "2", "-v", "-ldflags=" + ldflags, "-trimpath", "-buildmode=pie"} // go.bbclass appends -buildmode=pie
	for _, r := range strings.Fields(v["GOBUILDFLAGS:remove"]) {
		for i := 0; i < len(flags); i++ {
			if flags[i] == r {
				flags = append(flags[:i], flags[i+1:]...)
				i--
			}
		}
	}
	// do_compile, as the recipe writes it.
	m := regexp.MustCompile(`\$\{GO\} build \$\{GOBUILDFLAGS\} -o \$\{B\}/unwound-bin/ \\\n\s+(.*)\n`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("recipe do_compile: no `${GO} build ${GOBUILDFLAGS} -o ${B}/unwound-bin/ PACKAGES` line")
	}
	args := append(append([]string{"build"}, flags...), "-o", out+"/")
	args = append(args, strings.Fields(m[1])...)
	env := []string{"CGO_ENABLED=" + v["CGO_ENABLED"], "GOFLAGS=" + v["GOFLAGS"], "GOPROXY=" + v["GOPROXY"], "GO111MODULE=" + v["GO111MODULE"]}
	run(t, src, goEnv(tg, env...), args)
}

// buildrootBuild runs golang-package's build step: one go build per
// UNWOUND_BUILD_TARGETS entry, from the source top, into $(@D)/bin, with
// CGO_ENABLED=1 from HOST_GO_TARGET_ENV overridden by UNWOUND_GO_ENV.
func buildrootBuild(t *testing.T, src string, tg recipeTarget, out string) {
	t.Helper()
	v := mkVars(readRepo(t, brPkg+"unwound.mk"))
	ldflags := strings.ReplaceAll(v["UNWOUND_LDFLAGS"], "$(UNWOUND_VERSION)", v["UNWOUND_VERSION"])
	if tg.goarch == "arm64" {
		ldflags += " -extldflags '-fuse-ld=bfd'" // pkg-golang.mk, BR2_aarch64
	}
	env := append([]string{"CGO_ENABLED=1"}, strings.Fields(v["UNWOUND_GO_ENV"])...)
	for _, target := range strings.Fields(v["UNWOUND_BUILD_TARGETS"]) {
		args := []string{"build", "-v", "-ldflags", ldflags, "-modcacherw", "-tags", v["UNWOUND_TAGS"], "-trimpath", "-p", "2",
			"-buildvcs=false", "-o", filepath.Join(out, filepath.Base(target)), v["UNWOUND_GOMOD"] + "/" + target}
		run(t, src, goEnv(tg, env...), args)
	}
}

func run(t *testing.T, dir string, env, args []string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// checkBoardBinary: static, the target's machine, a GNU build ID, symbols
// left for the build system to strip.
func checkBoardBinary(t *testing.T, path string, tg recipeTarget) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	name := filepath.Base(path)
	if f.Machine != tg.machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %v %v, want a static %v executable", name, f.Machine, f.Type, tg.machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s: has %v: dynamically linked", name, p.Type)
		}
	}
	if f.Section(".dynamic") != nil || f.Section(".interp") != nil {
		t.Errorf("%s: has a dynamic section", name)
	}
	if f.Section(".symtab") == nil {
		t.Errorf("%s: stripped by go; the build system strips (and keeps the symbols in -dbg)", name)
	}
	if s := f.Section(".note.gnu.build-id"); s == nil {
		t.Errorf("%s: no GNU build ID (-B gobuildid)", name)
	}
	if tg.machine == elf.EM_ARM {
		// GOARM reaches the binary: 5 is soft-float, 6 and 7 use VFP.
		if b, err := f.Section(".go.buildinfo").Data(); err != nil || !strings.Contains(string(b), "GOARM="+tg.goarm) {
			t.Errorf("%s: build info does not say GOARM=%s", name, tg.goarm)
		}
	}
}

func TestRecipeBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds the board binaries with Go 1.22.12 for every target")
	}
	top := distTree(t)
	// Yocto's tree: the tarball unpacked into ${S}/src/${GO_IMPORT}.
	s := t.TempDir()
	yoctoSrc := filepath.Join(s, "src", modulePath(t))
	if err := os.MkdirAll(filepath.Dir(yoctoSrc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(top, yoctoSrc); err != nil {
		t.Fatal(err)
	}
	// The toolchain from the module cache (fetched once, like make test-go122).
	testutil.Run(t, "go", "version")
	fetch := exec.Command("go", "version")
	fetch.Env = append(os.Environ(), "GOTOOLCHAIN="+go122)
	if out, err := fetch.CombinedOutput(); err != nil || !strings.Contains(string(out), go122) {
		t.Fatalf("GOTOOLCHAIN=%s go version: %v %s", go122, err, out)
	}
	_, pv, _ := yoctoRecipe(t)
	for _, tg := range recipeTargets {
		name := tg.goarch + tg.goarm
		t.Run(name, func(t *testing.T) {
			for sys, build := range map[string]func(*testing.T, string, recipeTarget, string){
				"yocto":     func(t *testing.T, _ string, tg recipeTarget, out string) { yoctoBuild(t, yoctoSrc, tg, out) },
				"buildroot": buildrootBuild,
			} {
				out := t.TempDir()
				build(t, top, tg, out)
				for _, bin := range []string{"unwound-handler", "unwound-uploader"} {
					p := filepath.Join(out, bin)
					checkBoardBinary(t, p, tg)
					if tg.goarch == "amd64" {
						if v, err := exec.Command(p, "--version").Output(); err != nil || strings.TrimSpace(string(v)) != bin+" "+pv {
							t.Errorf("%s %s --version = %q (%v), want the recipe's version %s", sys, bin, v, err, pv)
						}
					}
				}
			}
		})
	}
}

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
	testutil.Run(t, "localedef", "-i", "en_US", "-f", "UTF-8", filepath.Join(work, "locale", "en_US.UTF-8"))
	for _, d := range []string{work, b.layer, filepath.Join(work, "locale")} {
		testutil.Run(t, "chown", "-R", bbUID+":"+bbUID, d)
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

// buildrootRelease is one Buildroot LTS release we support and the Go it
// builds host-go from.
type buildrootRelease struct {
	name, env, goVersion string
}

var buildrootReleases = []buildrootRelease{
	{"2024.02.13", envBuildroot24, "go1.22.12"},
	{"2025.02.16", envBuildroot25, "go1.26.3"},
}

// TestBuildrootRealTree runs each supported Buildroot release on
// buildroot/: utils/check-package on every file (0 warnings), each defconfig
// fragment merged into the board's defconfig (merge_config.sh, olddefconfig:
// unwound stays enabled with the fragment's settings), `make printvars` for
// the package's build and install commands, and those very commands run
// from the make dist tarball with the Go the release builds as host-go;
// then legal-info's licence step (support/download/check-hash) on every
// licence file with unwound.hash.
func TestBuildrootRealTree(t *testing.T) {
	for _, rel := range buildrootReleases {
		t.Run(rel.name, func(t *testing.T) {
			top := buildsysTree(t, rel.env)
			checkPackage(t, top)
			out := t.TempDir()
			for _, frag := range []string{"qemu_riscv64_virt", "qemu_arm_vexpress", "qemu_aarch64_virt"} {
				mergeFragment(t, top, out, frag)
			}
			// The last merge (AArch64) is the configuration printvars reads.
			buildrootPackageBuild(t, top, out, rel)
			buildrootLicences(t, top)
		})
	}
}

func brMake(top string, args ...string) *exec.Cmd {
	cmd := exec.Command("make", append([]string{"-s", "-C", top}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+hostPath, "LC_ALL=C")
	return cmd
}

// checkPackage: Buildroot's own linter on every file of the external tree.
func checkPackage(t *testing.T, top string) {
	t.Helper()
	files := filesUnder(t, "buildroot")
	if len(files) < 10 {
		t.Fatalf("buildroot/ has %d files", len(files))
	}
	args := []string{"-b"}
	for _, f := range files {
		args = append(args, filepath.Join(repoRoot(t), f))
	}
	cmd := exec.Command(filepath.Join(top, "utils", "check-package"), args...)
	cmd.Dir = top
	cmd.Env = append(os.Environ(), "PATH="+hostPath)
	out, err := cmd.CombinedOutput()
	t.Logf("utils/check-package -b buildroot/* (%d files): %s", len(files), strings.TrimSpace(tail(string(out), 200)))
	if err != nil || !strings.Contains(string(out), "\n0 warnings generated") {
		t.Errorf("utils/check-package: %v (needs python3-magic, flake8, shellcheck: make deps)\n%s", err, out)
	}
}

// mergeFragment merges configs/<board>_unwound_defconfig into Buildroot's
// configs/<board>_defconfig as buildroot/README.md says, and checks every
// setting of the fragment survives olddefconfig.
func mergeFragment(t *testing.T, top, out, board string) {
	t.Helper()
	frag := filepath.Join(repoRoot(t), "buildroot", "configs", board+"_unwound_defconfig")
	os.Remove(filepath.Join(out, ".config"))
	merge := exec.Command(filepath.Join(top, "support/kconfig/merge_config.sh"), "-m", "-O", out,
		filepath.Join(top, "configs", board+"_defconfig"), frag)
	merge.Dir = top
	merge.Env = append(os.Environ(), "PATH="+hostPath)
	runLogged(t, merge)
	runLogged(t, brMake(top, "O="+out, "BR2_EXTERNAL="+filepath.Join(repoRoot(t), "buildroot"), "olddefconfig"))
	config, err := os.ReadFile(filepath.Join(out, ".config"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(config), "\n") {
		have[l] = true
	}
	want := 0
	for _, l := range strings.Split(readRepo(t, "buildroot/configs/"+board+"_unwound_defconfig"), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		want++
		if !have[l] {
			t.Errorf("%s merged into Buildroot's %s_defconfig: olddefconfig dropped %s", filepath.Base(frag), board, l)
		}
	}
	if !have["BR2_PACKAGE_UNWOUND=y"] || want < 4 {
		t.Errorf("%s: BR2_PACKAGE_UNWOUND=y not in the merged .config", board)
	}
}

// printvars returns the values of vars as Buildroot expands them.
func printvars(t *testing.T, top, out string, vars ...string) map[string]string {
	t.Helper()
	text := runLogged(t, brMake(top, "O="+out, "printvars", "VARS="+strings.Join(vars, " ")))
	v := map[string]string{}
	name := ""
	for _, l := range strings.Split(text, "\n") {
		if m := regexp.MustCompile(`^([A-Z0-9_]+)=(.*)$`).FindStringSubmatch(l); m != nil {
			name = m[1]
			v[name] = m[2]
		} else if name != "" {
			v[name] += "\n" + l
		}
	}
	for k := range v {
		v[k] = strings.TrimRight(v[k], "\n\t ")
	}
	return v
}

// buildrootPackageBuild checks the package's build and install commands as
// this release expands them (printvars), then runs them: from the make dist
// tarball (what the download step leaves in $(@D), vendor/ included), with
// the release's Go in $(HOST_DIR) where host-go puts it (Go fetched from the
// module proxy: host-go's own bootstrap downloads are not reachable here).
// The C toolchain is not needed: cgo is off.
func buildrootPackageBuild(t *testing.T, top, out string, rel buildrootRelease) {
	t.Helper()
	v := printvars(t, top, out, "UNWOUND_BUILD_CMDS", "UNWOUND_INSTALL_TARGET_CMDS", "UNWOUND_INIT", "UNWOUND_VERSION")
	build, install := v["UNWOUND_BUILD_CMDS"], v["UNWOUND_INSTALL_TARGET_CMDS"]
	if i := strings.Index(build, " build "); i > 0 {
		t.Logf("make printvars: UNWOUND_BUILD_CMDS=... %.300s ...", build[i-40:])
	}
	host := filepath.Join(out, "host")
	for _, bin := range []string{"unwound-handler", "unwound-uploader"} {
		re := regexp.MustCompile(`CGO_ENABLED=1 .*CGO_ENABLED=0 ` + regexp.QuoteMeta(host+"/bin/go") + ` build .*-ldflags "-B gobuildid -X ` +
			regexp.QuoteMeta(modulePath(t)+"/internal/version.Version="+v["UNWOUND_VERSION"]) + `[ "].* -o \S*/bin/` + bin + ` ` +
			regexp.QuoteMeta(modulePath(t)+"/cmd/"+bin) + `\b`)
		if !re.MatchString(build) {
			t.Errorf("UNWOUND_BUILD_CMDS has no static go build of %s:\n%s", bin, tail(build, 1500))
		}
	}
	if v["UNWOUND_INIT"] != "sysvinit" || !strings.Contains(install, " install GO="+host+"/bin/go ") || !strings.Contains(install, "INIT=sysvinit") {
		t.Errorf("UNWOUND_INIT=%q, UNWOUND_INSTALL_TARGET_CMDS:\n%s", v["UNWOUND_INIT"], install)
	}

	// Host-go where Buildroot installs it, then $(@D): the release tarball
	// as Buildroot extracts it (top directory stripped).
	root := goroot(t, rel.goVersion)
	for _, d := range []string{"bin", "lib", "target"} {
		if err := os.MkdirAll(filepath.Join(out, "host", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.RemoveAll(filepath.Join(host, "lib", "go"))
	if err := os.Symlink(root, filepath.Join(host, "lib", "go")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(host, "bin", "go"))
	if err := os.Symlink(filepath.Join(root, "bin", "go"), filepath.Join(host, "bin", "go")); err != nil {
		t.Fatal(err)
	}
	pkgDir := filepath.Join(out, "build", "unwound-"+v["UNWOUND_VERSION"])
	copyTree(t, distTree(t), pkgDir)
	target := filepath.Join(out, "target")
	for _, step := range []struct{ name, cmds string }{{"build", build}, {"install", install}} {
		cmd := exec.Command("/bin/bash", "-e", "-c", step.cmds)
		cmd.Dir = pkgDir
		cmd.Env = append(os.Environ(), "PATH="+hostPath)
		runLogged(t, cmd)
	}
	tg := recipeTarget{goarch: "arm64", machine: elf.EM_AARCH64}
	for _, bin := range []string{"unwound-handler", "unwound-uploader"} {
		checkBoardBinary(t, filepath.Join(target, "usr/bin", bin), tg)
		f, err := elf.Open(filepath.Join(target, "usr/bin", bin))
		if err == nil {
			bi, _ := f.Section(".go.buildinfo").Data()
			if !strings.Contains(string(bi), rel.goVersion) {
				t.Errorf("%s: not built with %s", bin, rel.goVersion)
			}
			f.Close()
		}
	}
	kv := sysctlConf(t, filepath.Join(target, "etc/sysctl.d/60-unwound.conf"))
	if want := "|/usr/bin/unwound-handler --config /etc/unwound/unwound.toml "; !strings.HasPrefix(kv["kernel.core_pattern"], want) {
		t.Errorf("core_pattern = %q, want %s...", kv["kernel.core_pattern"], want)
	}
	if _, err := os.Stat(filepath.Join(target, "etc/unwound/unwound.toml")); err != nil {
		t.Error(err)
	}
}

// buildrootLicences runs what `make legal-info` runs for each licence file
// (legal-license-file in package/pkg-utils.mk: support/download/check-hash
// with the package's .hash) on the licence files of the make dist tarball:
// each must have a hash and match it (check-hash exits 3 for "no hash",
// which legal-info lets pass: we do not).
func buildrootLicences(t *testing.T, top string) {
	t.Helper()
	mk := mkVars(readRepo(t, brPkg+"unwound.mk"))
	hash := filepath.Join(repoRoot(t), brPkg, "unwound.hash")
	src := distTree(t)
	files := strings.Fields(mk["UNWOUND_LICENSE_FILES"])
	if len(files) < 8 {
		t.Fatalf("UNWOUND_LICENSE_FILES: %v", files)
	}
	for _, f := range files {
		cmd := exec.Command(filepath.Join(top, "support/download/check-hash"), filepath.Join(src, f), f, hash)
		cmd.Env = append(os.Environ(), "PATH="+hostPath)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("support/download/check-hash %s: %v\n%s", f, err, out)
		}
	}
}
