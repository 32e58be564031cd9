package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

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
