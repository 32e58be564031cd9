package packaging

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

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
