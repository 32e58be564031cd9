package packaging

import (
	"bufio"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/config"
)

// The Yocto layer and the Buildroot tree checked without bitbake or
// Buildroot (build_test.go runs the real ones where they are given): the
// variables each system reads, the files they name, the make install
// variables they pass, the licence checksums against the vendor/ of the
// release tree `make dist` builds, and the rules of check-package and
// yocto-check-layer that hold without those tools.

// freshVendor is the vendor/ of the release tree make dist builds (the
// fleet collector left out, scripts/dist-prune.sh): what the Yocto and
// Buildroot packages unpack, and whose licences they declare.
func freshVendor(t *testing.T) string {
	t.Helper()
	return filepath.Join(distTree(t), "vendor")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if distDir != "" {
		os.RemoveAll(distDir)
	}
	os.Exit(code)
}

// vendorLicences lists the licence files of the vendored modules, relative
// to the source tree ("vendor/...").
func vendorLicences(t *testing.T) []string {
	t.Helper()
	vendor := freshVendor(t)
	var files []string
	err := filepath.Walk(vendor, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		name := strings.ToUpper(info.Name())
		if strings.HasPrefix(name, "LICENSE") || strings.HasPrefix(name, "LICENCE") || strings.HasPrefix(name, "COPYING") {
			rel, _ := filepath.Rel(filepath.Dir(vendor), p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no licence file in the vendored modules")
	}
	return files
}

// sourceFile reads a file of the release tree: vendor/ from the fresh
// vendor directory, the rest from the repository.
func sourceFile(t *testing.T, rel string) []byte {
	t.Helper()
	p := filepath.Join(repoRoot(t), rel)
	if strings.HasPrefix(rel, "vendor/") {
		p = filepath.Join(filepath.Dir(freshVendor(t)), rel)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("release tree file: %v", err)
	}
	return b
}

func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// logicalLines joins backslash continuations and drops comments and blanks.
func logicalLines(text string) []string {
	var out []string
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if cur == "" && strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cur += line
		if strings.TrimSpace(cur) != "" {
			out = append(out, cur)
		}
		cur = ""
	}
	return out
}

var bbAssign = regexp.MustCompile(`^(?:export\s+)?([A-Za-z0-9_\-:${}\[\]\.]+)\s*(\?\?=|\?=|\+=|\.=|=\+|=\.|:=|=)\s*"(.*)"\s*$`)

// bbVars parses BitBake assignments; += and .= append, so values are joined.
func bbVars(t *testing.T, text string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, l := range logicalLines(text) {
		m := bbAssign.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v := strings.Join(strings.Fields(m[3]), " ")
		switch m[2] {
		case "+=", ".=":
			vars[m[1]] = strings.TrimSpace(vars[m[1]] + " " + v)
		default:
			vars[m[1]] = v
		}
	}
	return vars
}

var mkAssign = regexp.MustCompile(`^([A-Z0-9_]+)\s*(\+=|\?=|:=|=)\s*(.*)$`)

// mkVars parses make assignments at the start of a line (not inside define).
func mkVars(text string) map[string]string {
	vars := map[string]string{}
	inDefine := false
	for _, l := range logicalLines(text) {
		switch {
		case strings.HasPrefix(l, "define "):
			inDefine = true
		case strings.HasPrefix(l, "endef"):
			inDefine = false
		}
		if inDefine {
			continue
		}
		if m := mkAssign.FindStringSubmatch(l); m != nil {
			v := strings.Join(strings.Fields(m[3]), " ")
			if m[2] == "+=" {
				v = strings.TrimSpace(vars[m[1]] + " " + v)
			}
			vars[m[1]] = v
		}
	}
	return vars
}

// makeInstallArgs returns the VAR=value arguments of the `... install`
// invocation in a recipe or .mk text.
func makeInstallArgs(t *testing.T, text string) map[string]string {
	t.Helper()
	for _, l := range logicalLines(text) {
		if !regexp.MustCompile(`(make|MAKE\)|oe_runmake)\s.*\binstall\b`).MatchString(l) {
			continue
		}
		args := map[string]string{}
		for _, m := range regexp.MustCompile(`\b([A-Z_][A-Z0-9_]*)=("[^"]*"|\S*)`).FindAllStringSubmatch(l, -1) {
			args[m[1]] = strings.Trim(m[2], `"`)
		}
		return args
	}
	t.Fatal("no make install invocation")
	return nil
}

// checkMakeInstall checks the make install command of a recipe's text:
// the VAR=value arguments in want are given, and every argument is a
// variable of the Makefile (checkMakeVars).
func checkMakeInstall(t *testing.T, text string, want map[string]string) {
	t.Helper()
	args := makeInstallArgs(t, text)
	checkMakeVars(t, args)
	for k, want := range want {
		if args[k] != want {
			t.Errorf("make install %s=%q, want %q", k, args[k], want)
		}
	}
}

// checkMakeVars fails for a variable passed to make install that the
// Makefile does not define (a typo would be silently ignored by make).
func checkMakeVars(t *testing.T, args map[string]string) {
	t.Helper()
	makefile := readRepo(t, "Makefile")
	for name := range args {
		if !regexp.MustCompile(`(?m)^` + name + `\s*(\?|:)?=`).MatchString(makefile) {
			t.Errorf("make install %s=: the Makefile has no variable %s", name, name)
		}
	}
	for _, need := range []string{"DESTDIR", "PREFIX", "SYSCONFDIR", "QUEUE_DIR", "INIT", "PREBUILT"} {
		if _, ok := args[need]; !ok {
			t.Errorf("make install is not given %s", need)
		}
	}
}

func modulePath(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindStringSubmatch(readRepo(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod: no module line")
	}
	return m[1]
}

func defaultQueueDir(t *testing.T) string {
	return config.Default().Queue.Dir
}

func TestYoctoLayer(t *testing.T) {
	root := repoRoot(t)
	layer := bbVars(t, readRepo(t, "recipes/conf/layer.conf"))
	want := map[string]string{
		"BBFILE_PATTERN_unwound":     "^${LAYERDIR}/",
		"LAYERSERIES_COMPAT_unwound": "scarthgap",
		"LAYERDEPENDS_unwound":       "core",
	}
	for k, v := range want {
		if layer[k] != v {
			t.Errorf("layer.conf %s = %q, want %q", k, layer[k], v)
		}
	}
	if layer["BBFILE_COLLECTIONS"] != "unwound" {
		t.Errorf("BBFILE_COLLECTIONS = %q", layer["BBFILE_COLLECTIONS"])
	}
	if p, err := strconv.Atoi(layer["BBFILE_PRIORITY_unwound"]); err != nil || p < 1 || p > 99 {
		t.Errorf("BBFILE_PRIORITY_unwound = %q", layer["BBFILE_PRIORITY_unwound"])
	}
	if !strings.Contains(layer["BBPATH"], "${LAYERDIR}") {
		t.Errorf("BBPATH = %q", layer["BBPATH"])
	}
	// Every recipe is found by BBFILES, and BBFILES finds some.
	matched := map[string]bool{}
	for _, g := range strings.Fields(layer["BBFILES"]) {
		files, _ := filepath.Glob(strings.ReplaceAll(g, "${LAYERDIR}", filepath.Join(root, "recipes")))
		for _, f := range files {
			matched[f] = true
		}
	}
	recipes, _ := filepath.Glob(filepath.Join(root, "recipes/recipes-*/*/*.bb"))
	all, _ := filepath.Glob(filepath.Join(root, "recipes/*/*/*.bb"))
	if len(recipes) == 0 || len(all) != len(recipes) {
		t.Errorf("recipes outside recipes-*/: %v", all)
	}
	for _, r := range recipes {
		if !matched[r] {
			t.Errorf("%s is not matched by BBFILES", r)
		}
	}

	readme := readRepo(t, "recipes/README.md")
	for _, s := range []string{"Maintainer:", "patches", "IMAGE_INSTALL", "-funwind-tables", "-fasynchronous-unwind-tables", "UNWOUND_QUEUE_DIR",
		"OS_RELEASE_FIELDS", "IMAGE_VERSION", "attributes = {"} {
		if !strings.Contains(readme, s) {
			t.Errorf("recipes/README.md does not mention %q", s)
		}
	}
	if !regexp.MustCompile(`Maintainer:.*<[^@\s]+@[^>\s]+>`).MatchString(readme) {
		t.Error("recipes/README.md: no maintainer email")
	}

	if pg := bbVars(t, readRepo(t, "recipes/recipes-core/packagegroups/packagegroup-unwound.bb")); pg["RDEPENDS:${PN}"] != "unwound" {
		t.Errorf("packagegroup RDEPENDS = %q", pg["RDEPENDS:${PN}"])
	}
}

func yoctoRecipe(t *testing.T) (path, pv, text string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "recipes/recipes-support/unwound/unwound_*.bb"))
	if len(files) != 1 {
		t.Fatalf("want one unwound_<version>.bb, have %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	pv = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(files[0]), "unwound_"), ".bb")
	return files[0], pv, string(b)
}

func TestYoctoRecipe(t *testing.T) {
	_, pv, text := yoctoRecipe(t)
	v := bbVars(t, text)
	if v["GO_IMPORT"] != modulePath(t) {
		t.Errorf("GO_IMPORT = %q, go.mod says %q", v["GO_IMPORT"], modulePath(t))
	}
	for k, want := range map[string]string{
		"CGO_ENABLED":       "0",
		"UNWOUND_QUEUE_DIR": defaultQueueDir(t),
		"INITSCRIPT_NAME":   "unwound",
		"GOFLAGS":           "-mod=vendor",
		"GOPROXY":           "off",
	} {
		got, ok := v[k]
		if !ok || got != want {
			t.Errorf("%s = %q (set: %v), want %q", k, got, ok, want)
		}
	}
	// go.bbclass reads these only in its own do_compile, which the recipe
	// replaces: setting them would suggest an effect they do not have.
	for _, k := range []string{"GO_INSTALL", "GO_LINKSHARED"} {
		if _, ok := v[k]; ok {
			t.Errorf("recipe sets %s, which its own do_compile never reads", k)
		}
	}
	if !strings.Contains(v["GOBUILDFLAGS:remove"], "-buildmode=pie") {
		t.Error(`GOBUILDFLAGS:remove lacks "-buildmode=pie"`)
	}
	if lic := v["LICENSE"]; lic == "" || strings.Contains(lic, " AND ") || !strings.HasPrefix(lic, "Apache-2.0") {
		t.Errorf("LICENSE = %q (Apache-2.0 first, '&' not 'AND')", lic)
	}
	if !regexp.MustCompile(`(?m)^inherit go\b`).MatchString(text) {
		t.Error("recipe does not inherit go")
	}
	// The init classes follow UNWOUND_INIT (bitbake -e checks the three
	// DISTRO_FEATURES cases in TestYoctoParse).
	for _, s := range []string{
		"${@'systemd' if d.getVar('UNWOUND_INIT') == 'systemd' else ''}",
		"${@'update-rc.d' if d.getVar('UNWOUND_INIT') == 'sysvinit' else ''}",
		"bb.utils.contains('DISTRO_FEATURES', 'systemd', 'systemd',",
	} {
		if !strings.Contains(text, s) {
			t.Errorf("recipe lacks %s", s)
		}
	}
	src := v["SRC_URI"]
	if !strings.Contains(src, "/unwound-${PV}.tar.gz;") || !strings.Contains(src, "striplevel=1") || !strings.Contains(src, "subdir=${UNWOUND_SRC_SUBDIR}") {
		t.Errorf("SRC_URI = %q: want the make dist tarball unwound-${PV}.tar.gz unpacked into ${S}/src/${GO_IMPORT}", src)
	}
	if !strings.Contains(readRepo(t, "Makefile"), "DIST_NAME := unwound-$(VERSION)") {
		t.Error("Makefile dist no longer names the tarball unwound-$(VERSION)")
	}
	if pv == "" {
		t.Error("recipe has no version in its name")
	}

	// make install: variables that exist, INIT from DISTRO_FEATURES, the
	// init script name update-rc.d expects, binaries from do_compile.
	checkMakeInstall(t, text, map[string]string{
		"INIT":       "${UNWOUND_INIT}",
		"QUEUE_DIR":  "${UNWOUND_QUEUE_DIR}",
		"DESTDIR":    "${D}",
		"INITSCRIPT": v["INITSCRIPT_NAME"],
		"PREBUILT":   "${B}/unwound-bin",
		"BOARD_CMDS": "unwound-handler unwound-uploader",
		// The generator runs on the build host: not with ${GO}, the
		// cross wrapper that exports the target's GOARCH.
		"HOST_GO":      "${STAGING_BINDIR_NATIVE}/go",
		"INSTALL_WORK": "${B}/install-work",
	})
	if !strings.Contains(text, "-o ${B}/unwound-bin/") {
		t.Error("do_compile does not build into ${B}/unwound-bin/, where make install takes the binaries")
	}

	// Units named by the recipe are the ones make install installs.
	units := []string{"unwound-upload-once.service", "unwound-upload-once.timer", "unwound-coredump.socket", "unwound-coredump.service"}
	for _, u := range strings.Fields(v["SYSTEMD_SERVICE:${PN}"]) {
		if !strings.HasPrefix(u, "${") { // ${UNWOUND_SOCKET_UNITS}: checked below
			units = append(units, u)
		}
	}
	if v["UNWOUND_SOCKET"] != "off" || !strings.Contains(v["UNWOUND_SOCKET_UNITS"], "'unwound-coredump.socket'") {
		t.Errorf("UNWOUND_SOCKET = %q (want off by default), UNWOUND_SOCKET_UNITS = %q", v["UNWOUND_SOCKET"], v["UNWOUND_SOCKET_UNITS"])
	}
	for _, unit := range units {
		if !fileExists(t, "packaging/systemd/"+unit) && !fileExists(t, "packaging/systemd/"+unit+".in") {
			t.Errorf("recipe names %s, not in packaging/systemd", unit)
		}
		if !strings.Contains(v["FILES:${PN}"], unit) && !strings.Contains(v["SYSTEMD_SERVICE:${PN}"], unit) {
			t.Errorf("%s is in neither SYSTEMD_SERVICE nor FILES", unit)
		}
	}
	for _, f := range []string{"${nonarch_libdir}/sysctl.d/60-unwound.conf", "${sysconfdir}/sysctl.d/60-unwound.conf", "${UNWOUND_QUEUE_DIR}"} {
		if !strings.Contains(v["FILES:${PN}"], f) {
			t.Errorf("FILES:${PN} lacks %s", f)
		}
	}
}

func fileExists(t *testing.T, rel string) bool {
	_, err := os.Stat(filepath.Join(repoRoot(t), rel))
	return err == nil
}

// TestYoctoLicences checks every LIC_FILES_CHKSUM md5 against a fresh
// `go mod vendor` and that every vendored licence file is listed.
func TestYoctoLicences(t *testing.T) {
	_, _, text := yoctoRecipe(t)
	v := bbVars(t, text)
	listed := map[string]bool{}
	re := regexp.MustCompile(`^file://src/\$\{GO_IMPORT\}/([^;]+);md5=([0-9a-f]{32})$`)
	for _, e := range strings.Fields(v["LIC_FILES_CHKSUM"]) {
		m := re.FindStringSubmatch(e)
		if m == nil {
			t.Errorf("LIC_FILES_CHKSUM entry %q: want file://src/${GO_IMPORT}/PATH;md5=HEX", e)
			continue
		}
		listed[m[1]] = true
		sum := md5.Sum(sourceFile(t, m[1]))
		if got := hex.EncodeToString(sum[:]); got != m[2] {
			t.Errorf("LIC_FILES_CHKSUM %s: md5 %s, the file's is %s", m[1], m[2], got)
		}
	}
	if !listed["LICENSE"] {
		t.Error("LIC_FILES_CHKSUM lacks the top LICENSE")
	}
	for _, f := range vendorLicences(t) {
		if !listed[f] {
			t.Errorf("vendored licence %s is not in LIC_FILES_CHKSUM", f)
		}
	}
}

const brPkg = "buildroot/package/unwound/"

func TestBuildrootExternal(t *testing.T) {
	root := repoRoot(t)
	if !regexp.MustCompile(`(?m)^name: UNWOUND$`).MatchString(readRepo(t, "buildroot/external.desc")) {
		t.Error("external.desc: want 'name: UNWOUND'")
	}
	if !strings.Contains(readRepo(t, "buildroot/external.mk"), "$(BR2_EXTERNAL_UNWOUND_PATH)/package/*/*.mk") {
		t.Error("external.mk does not include the packages' .mk files")
	}
	// Config.in sources every package's Config.in, and only files that exist.
	sourced := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^source "\$BR2_EXTERNAL_UNWOUND_PATH/([^"]+)"$`).FindAllStringSubmatch(readRepo(t, "buildroot/Config.in"), -1) {
		sourced[m[1]] = true
		if !fileExists(t, "buildroot/"+m[1]) {
			t.Errorf("Config.in sources %s, which does not exist", m[1])
		}
	}
	pkgs, _ := filepath.Glob(filepath.Join(root, "buildroot/package/*/Config.in"))
	for _, p := range pkgs {
		rel, _ := filepath.Rel(filepath.Join(root, "buildroot"), p)
		if !sourced[rel] {
			t.Errorf("Config.in does not source %s", rel)
		}
	}
	if !fileExists(t, "buildroot/README.md") {
		t.Error("buildroot/README.md missing")
	} else {
		readme := readRepo(t, "buildroot/README.md")
		for _, s := range []string{"BR2_ROOTFS_POST_BUILD_SCRIPT", "IMAGE_VERSION", "BR2_ROOTFS_OVERLAY", "attributes = {"} {
			if !strings.Contains(readme, s) {
				t.Errorf("buildroot/README.md does not mention %q", s)
			}
		}
	}

	cfg := readRepo(t, brPkg+"Config.in")
	symbols := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^config (\S+)$`).FindAllStringSubmatch(cfg, -1) {
		symbols[m[1]] = true
	}
	// check-package: help text indented by a tab and two spaces, 72 columns.
	for i, l := range strings.Split(cfg, "\n") {
		if strings.HasPrefix(l, "\t  ") && len(strings.Replace(l, "\t", "        ", 1)) > 72 {
			t.Errorf("package Config.in:%d: help line over 72 columns", i+1)
		}
	}
	mk := readRepo(t, brPkg+"unwound.mk")
	for _, m := range regexp.MustCompile(`BR2_PACKAGE_UNWOUND\w*`).FindAllString(mk, -1) {
		if !symbols[m] {
			t.Errorf("unwound.mk uses %s, not defined in its Config.in", m)
		}
	}
	defconfigs, _ := filepath.Glob(filepath.Join(root, "buildroot/configs/*_defconfig"))
	if len(defconfigs) == 0 {
		t.Error("no defconfig")
	}
	for _, d := range defconfigs {
		b, _ := os.ReadFile(d)
		for _, line := range []string{"BR2_DOWNLOAD_FORCE_CHECK_HASHES=y", "BR2_PACKAGE_UNWOUND=y"} {
			if !regexp.MustCompile(`(?m)^` + line + `$`).Match(b) {
				t.Errorf("%s lacks %s", filepath.Base(d), line)
			}
		}
	}
}

func TestBuildrootPackage(t *testing.T) {
	root := repoRoot(t)
	mk := readRepo(t, brPkg+"unwound.mk")
	if !strings.HasPrefix(mk, strings.Repeat("#", 80)+"\n#\n# unwound\n#\n"+strings.Repeat("#", 80)+"\n") {
		t.Error("unwound.mk: check-package wants the 80-column header naming the package")
	}
	if !strings.Contains(mk, "$(eval $(golang-package))") {
		t.Error("unwound.mk is not a golang-package")
	}
	v := mkVars(mk)
	if v["UNWOUND_GOMOD"] != modulePath(t) {
		t.Errorf("UNWOUND_GOMOD = %q", v["UNWOUND_GOMOD"])
	}
	if _, ok := v["UNWOUND_INSTALL_BINS"]; ok {
		t.Error("UNWOUND_INSTALL_BINS is an error since Buildroot 2025.11")
	}
	if v["UNWOUND_BUILD_TARGETS"] != "cmd/unwound-handler cmd/unwound-uploader" {
		t.Errorf("UNWOUND_BUILD_TARGETS = %q", v["UNWOUND_BUILD_TARGETS"])
	}
	for _, target := range strings.Fields(v["UNWOUND_BUILD_TARGETS"]) {
		if !fileExists(t, target) {
			if target == "cmd/unwound-uploader" {
				t.Logf("%s is not in this tree yet (being written); the release tarball must have it", target)
				continue
			}
			t.Errorf("UNWOUND_BUILD_TARGETS: %s does not exist", target)
		}
	}
	if !strings.Contains(v["UNWOUND_GO_ENV"], "CGO_ENABLED=0") {
		t.Errorf("UNWOUND_GO_ENV = %q: want CGO_ENABLED=0 (static)", v["UNWOUND_GO_ENV"])
	}
	if !strings.Contains(v["UNWOUND_LDFLAGS"], modulePath(t)+"/internal/version.Version=$(UNWOUND_VERSION)") {
		t.Errorf("UNWOUND_LDFLAGS = %q", v["UNWOUND_LDFLAGS"])
	}
	// The make dist tarball, unwound-$(UNWOUND_VERSION).tar.gz, is
	// Buildroot's default _SOURCE (check-package warns when it is set).
	if src, ok := v["UNWOUND_SOURCE"]; ok {
		t.Errorf("UNWOUND_SOURCE = %q: the default is the make dist tarball's name", src)
	}
	if !strings.Contains(readRepo(t, "Makefile"), "DIST_NAME := unwound-$(VERSION)") {
		t.Error("Makefile dist no longer names the tarball unwound-$(VERSION), Buildroot's default UNWOUND_SOURCE")
	}
	if _, pv, _ := yoctoRecipe(t); v["UNWOUND_VERSION"] != pv {
		t.Errorf("Buildroot version %q, Yocto recipe version %q", v["UNWOUND_VERSION"], pv)
	}
	for _, sym := range []string{"BR2_INIT_SYSTEMD", "BR2_INIT_BUSYBOX", "BR2_INIT_SYSV"} {
		if !strings.Contains(mk, sym) {
			t.Errorf("unwound.mk does not look at %s", sym)
		}
	}
	checkMakeInstall(t, mk, map[string]string{
		"DESTDIR":    "$(TARGET_DIR)",
		"INIT":       "$(UNWOUND_INIT)",
		"PREBUILT":   "$(@D)/bin",
		"INITSCRIPT": "",
		"BOARD_CMDS": "unwound-handler unwound-uploader",
	})

	// Licence files: listed, hashed in unwound.hash, hashes right, complete.
	hashes := map[string]string{}
	for i, l := range strings.Split(readRepo(t, brPkg+"unwound.hash"), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		m := regexp.MustCompile(`^sha256  ([0-9a-f]{64})  (\S+)$`).FindStringSubmatch(l)
		if m == nil {
			t.Errorf("unwound.hash:%d: want 'sha256  HEX  FILE', got %q", i+1, l)
			continue
		}
		hashes[m[2]] = m[1]
	}
	files := strings.Fields(v["UNWOUND_LICENSE_FILES"])
	listed := map[string]bool{}
	for _, f := range files {
		listed[f] = true
		sum := sha256.Sum256(sourceFile(t, f))
		if got := hex.EncodeToString(sum[:]); hashes[f] != got {
			t.Errorf("unwound.hash %s: %q, the file's sha256 is %s", f, hashes[f], got)
		}
	}
	if !listed["LICENSE"] {
		t.Error("UNWOUND_LICENSE_FILES lacks LICENSE")
	}
	for _, f := range vendorLicences(t) {
		if !listed[f] {
			t.Errorf("vendored licence %s is not in UNWOUND_LICENSE_FILES", f)
		}
	}

	// The init script: in the package directory, not executable
	// (check-package), installed by the .mk, and the default-path rendering
	// of packaging/sysvinit/unwound.in.
	scripts, _ := filepath.Glob(filepath.Join(root, brPkg+"S[0-9][0-9]*"))
	if len(scripts) != 1 {
		t.Fatalf("want one S..unwound init script in %s, have %v", brPkg, scripts)
	}
	name := filepath.Base(scripts[0])
	if st, err := os.Stat(scripts[0]); err != nil || st.Mode().Perm()&0o111 != 0 {
		t.Errorf("%s must not be executable (check-package): %v", name, st.Mode())
	}
	if out, err := exec.Command("git", "-C", root, "ls-files", "-s", brPkg+name).Output(); err == nil && len(out) > 0 && !strings.HasPrefix(string(out), "100644 ") {
		t.Errorf("%s is committed executable: %s", name, out)
	}
	if !strings.Contains(mk, "$(UNWOUND_PKGDIR)/"+name) || !strings.Contains(mk, "/etc/init.d/"+name) || !strings.Contains(mk, "define UNWOUND_INSTALL_INIT_SYSV") {
		t.Errorf("unwound.mk does not install %s in UNWOUND_INSTALL_INIT_SYSV", name)
	}
	if !regexp.MustCompile(`(?s)define UNWOUND_INSTALL_INIT_SYSTEMD\n.*enable unwound-uploader\.service.*system-preset/50-unwound\.preset\nendef`).MatchString(mk) {
		t.Error("unwound.mk does not install a preset enabling unwound-uploader.service")
	}
	tmpl := readRepo(t, "packaging/sysvinit/unwound.in")
	r := strings.NewReplacer("@BINDIR@", "/usr/bin", "@CONFIG@", "/etc/unwound/unwound.toml",
		"@QUEUE_DIR@", defaultQueueDir(t), "@CORE_PIPE_LIMIT@", "4",
		"@SOCKET@", "/run/unwound/coredump.sock", "@CORE_PATTERN_SOCKET@", "off")
	if got := readRepo(t, brPkg+name); got != r.Replace(tmpl) {
		t.Errorf("%s differs from packaging/sysvinit/unwound.in with the default paths: regenerate it", name)
	}
}

// Rules of Buildroot's utils/check-package and of yocto-check-layer /
// the OE style guide that can be checked without those tools.

// textRules: no trailing whitespace, no two empty lines in a row, one
// newline at the end (check-package TrailingSpace, ConsecutiveEmptyLines,
// EmptyLastLine, NewlineAtEof).
func textRules(t *testing.T, rel string) {
	t.Helper()
	text := readRepo(t, rel)
	if !strings.HasSuffix(text, "\n") || strings.HasSuffix(text, "\n\n") {
		t.Errorf("%s: must end with exactly one newline", rel)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, l := range lines {
		if strings.TrimRight(l, " \t") != l {
			t.Errorf("%s:%d: trailing whitespace", rel, i+1)
		}
		if i > 0 && l == "" && lines[i-1] == "" {
			t.Errorf("%s:%d: consecutive empty lines", rel, i+1)
		}
	}
}

func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	root := repoRoot(t)
	filepath.Walk(filepath.Join(root, dir), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func TestBuildrootCheckPackageRules(t *testing.T) {
	for _, f := range filesUnder(t, "buildroot") {
		if strings.HasSuffix(f, ".md") {
			continue
		}
		textRules(t, f)
	}

	// .mk: every variable the package sets carries its prefix
	// (check-package: "possible typo"); define blocks indented by tabs.
	mk := readRepo(t, brPkg+"unwound.mk")
	inDefine := false
	for i, l := range strings.Split(mk, "\n") {
		switch {
		case strings.HasPrefix(l, "define "):
			inDefine = true
			if name := strings.TrimPrefix(l, "define "); !strings.HasPrefix(name, "UNWOUND_") {
				t.Errorf("unwound.mk:%d: define %s lacks the UNWOUND_ prefix", i+1, name)
			}
			continue
		case l == "endef":
			inDefine = false
			continue
		}
		if inDefine {
			if l != "" && !strings.HasPrefix(l, "\t") {
				t.Errorf("unwound.mk:%d: a define body line must start with a tab: %q", i+1, l)
			}
			continue
		}
		if m := regexp.MustCompile(`^([A-Za-z0-9_]+)\s*(\+=|\?=|:=|=)`).FindStringSubmatch(l); m != nil && !strings.HasPrefix(strings.TrimPrefix(m[1], "HOST_"), "UNWOUND_") {
			t.Errorf("unwound.mk:%d: %s is not an UNWOUND_ variable", i+1, m[1])
		}
		if strings.HasPrefix(l, "\t") && !strings.HasSuffix(strings.TrimSpace(l), "\\") && i > 0 && !strings.HasSuffix(strings.Split(mk, "\n")[i-1], "\\") {
			t.Errorf("unwound.mk:%d: tab-indented line outside a define or continuation", i+1)
		}
	}
	for _, need := range []string{"UNWOUND_VERSION", "UNWOUND_SITE", "UNWOUND_LICENSE", "UNWOUND_LICENSE_FILES"} {
		if !regexp.MustCompile(`(?m)^` + need + ` = `).MatchString(mk) {
			t.Errorf("unwound.mk: no '%s = ' (check-package wants ' = ' around the sign)", need)
		}
	}

	// Config.in: entries at column 0, their attributes one tab in, help
	// text a tab and two spaces in, at most 72 columns (tab = 8).
	for _, f := range []string{"buildroot/Config.in", brPkg + "Config.in"} {
		inHelp := false
		for i, l := range strings.Split(strings.TrimSuffix(readRepo(t, f), "\n"), "\n") {
			word := strings.Fields(l + " x")[0]
			switch {
			case l == "":
				continue
			case regexp.MustCompile(`^(config|menuconfig|if|endif|comment|source|menu|endmenu|choice|endchoice) ?`).MatchString(l):
				inHelp = false
			case inHelp:
				if !strings.HasPrefix(l, "\t  ") {
					t.Errorf("%s:%d: help text must be indented by a tab and two spaces: %q", f, i+1, l)
				}
				if n := len(strings.Replace(l, "\t", "        ", 1)); n > 72 {
					t.Errorf("%s:%d: help line of %d columns (72 at most)", f, i+1, n)
				}
			case strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "\t\t") && !strings.HasPrefix(l, "\t "):
				if word == "help" {
					inHelp = true
				}
				if !regexp.MustCompile(`^\t(bool|string|int|depends on|select|default|help|range|prompt)\b`).MatchString(l) {
					t.Errorf("%s:%d: unknown attribute %q", f, i+1, l)
				}
			default:
				t.Errorf("%s:%d: bad indentation: %q", f, i+1, l)
			}
		}
	}

	// The hash file: comment lines, then "sha256  HEX  FILE".
	for i, l := range strings.Split(strings.TrimSuffix(readRepo(t, brPkg+"unwound.hash"), "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") && !regexp.MustCompile(`^(sha256  [0-9a-f]{64}|sha1  [0-9a-f]{40}|md5  [0-9a-f]{32}|sha512  [0-9a-f]{128})  \S+$`).MatchString(l) {
			t.Errorf("unwound.hash:%d: %q", i+1, l)
		}
	}

	// external.desc: name in upper case; desc one line.
	if !regexp.MustCompile(`^name: [A-Z0-9_]+\ndesc: .+\n$`).MatchString(readRepo(t, "buildroot/external.desc")) {
		t.Error("external.desc: want 'name: UPPER' and 'desc: …'")
	}
}

// TestBuildrootDefconfigs: a fragment for each QEMU board Buildroot has,
// enabling unwound with checked downloads, a GNU build ID, and the unwind
// tables of its architecture.
func TestBuildrootDefconfigs(t *testing.T) {
	for name, want := range map[string][]string{
		"qemu_aarch64_virt_unwound_defconfig": {"BR2_aarch64=y", `BR2_TARGET_OPTIMIZATION="-fasynchronous-unwind-tables"`},
		"qemu_arm_vexpress_unwound_defconfig": {"BR2_arm=y", "BR2_cortex_a9=y", `BR2_TARGET_OPTIMIZATION="-funwind-tables"`},
		"qemu_riscv64_virt_unwound_defconfig": {"BR2_riscv=y", "BR2_RISCV_64=y", `BR2_TARGET_OPTIMIZATION="-fasynchronous-unwind-tables"`},
	} {
		text := readRepo(t, "buildroot/configs/"+name)
		for _, line := range append(want, "BR2_PACKAGE_UNWOUND=y", "BR2_DOWNLOAD_FORCE_CHECK_HASHES=y", `BR2_TARGET_LDFLAGS="-Wl,--build-id"`) {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).MatchString(text) {
				t.Errorf("%s lacks %s", name, line)
			}
		}
		// Only BR2_ symbols, one per line, no duplicates.
		seen := map[string]bool{}
		for i, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			m := regexp.MustCompile(`^(BR2_[A-Za-z0-9_]+)=(y|"[^"]*"|[0-9]+)$`).FindStringSubmatch(l)
			if m == nil {
				t.Errorf("%s:%d: %q", name, i+1, l)
				continue
			}
			if seen[m[1]] {
				t.Errorf("%s: %s set twice", name, m[1])
			}
			seen[m[1]] = true
		}
		if !strings.Contains(readRepo(t, "buildroot/README.md"), name) {
			t.Errorf("buildroot/README.md does not mention %s", name)
		}
	}
	if n := len(filesUnder(t, "buildroot/configs")); n != 3 {
		t.Errorf("%d defconfigs, want 3", n)
	}
}

// TestYoctoStyle: the OE style guide's variable order, spaces not tabs,
// a well-formed SRC_URI checksum, and yocto-check-layer's README rules.
func TestYoctoStyle(t *testing.T) {
	for _, f := range filesUnder(t, "recipes") {
		if strings.HasSuffix(f, ".md") {
			continue
		}
		textRules(t, f)
		if strings.Contains(readRepo(t, f), "\t") {
			t.Errorf("%s: tabs (the OE style guide indents with 4 spaces)", f)
		}
	}
	path, _, text := yoctoRecipe(t)
	rel, _ := filepath.Rel(repoRoot(t), path)
	// First appearance of each, in the style guide's order.
	order := []string{"SUMMARY", "DESCRIPTION", "HOMEPAGE", "BUGTRACKER", "SECTION", "LICENSE", "LIC_FILES_CHKSUM",
		"SRC_URI", "SRC_URI[sha256sum]", "inherit", "do_compile()", "do_install()", "SYSTEMD_SERVICE", "INITSCRIPT_NAME", "FILES:${PN}"}
	last, lastName := -1, ""
	for _, name := range order {
		i := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `[ (:=]`).FindStringIndex(text)
		if name == "do_compile()" || name == "do_install()" {
			i = regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name)).FindStringIndex(text)
		}
		if i == nil {
			t.Errorf("%s: no %s", rel, name)
			continue
		}
		if i[0] < last {
			t.Errorf("%s: %s comes before %s (OE style guide order)", rel, name, lastName)
		}
		last, lastName = i[0], name
	}
	v := bbVars(t, text)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(v["SRC_URI[sha256sum]"]) {
		t.Errorf("SRC_URI[sha256sum] = %q: want 64 hex digits (bitbake requires a checksum for http fetches)", v["SRC_URI[sha256sum]"])
	}
	if strings.Contains(v["SRC_URI"], "${AUTOREV}") || regexp.MustCompile(`\bgit://|gitsm://`).MatchString(v["SRC_URI"]) {
		t.Errorf("SRC_URI = %q: a release tarball, not a moving git source", v["SRC_URI"])
	}
	// No network outside do_fetch: nothing fetches in the tasks.
	for _, bad := range []string{"go mod download", "go get ", "curl ", "wget ", "GOPROXY=https"} {
		if strings.Contains(text, bad) {
			t.Errorf("%s: %q: network outside do_fetch", rel, bad)
		}
	}
	readme := readRepo(t, "recipes/README.md")
	for _, s := range []string{"bitbake-layers add-layer", "IMAGE_INSTALL", "three steps", "Maintainer:", "patches"} {
		if !strings.Contains(readme, s) {
			t.Errorf("recipes/README.md lacks %q", s)
		}
	}
	if !strings.Contains(readRepo(t, "buildroot/README.md"), "three steps") {
		t.Error("buildroot/README.md has no three-step guide")
	}
}

// TestVersionsAgree: the Yocto recipe's PV, Buildroot's UNWOUND_VERSION
// and the hash file's release line name the same version.
func TestVersionsAgree(t *testing.T) {
	_, pv, _ := yoctoRecipe(t)
	v := mkVars(readRepo(t, brPkg+"unwound.mk"))
	if v["UNWOUND_VERSION"] != pv {
		t.Errorf("Buildroot %q, Yocto %q", v["UNWOUND_VERSION"], pv)
	}
	if !strings.Contains(readRepo(t, brPkg+"unwound.hash"), "VERSION="+pv) {
		t.Errorf("unwound.hash does not say which version's tarball it will pin (VERSION=%s)", pv)
	}
	if !strings.Contains(readRepo(t, "recipes/README.md"), "unwound_"+pv+".bbappend") {
		t.Errorf("recipes/README.md names another version than %s", pv)
	}
}
