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
)

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
	if out, err := exec.Command("go", "version").CombinedOutput(); err != nil {
		t.Fatalf("go version: %v %s", err, out)
	}
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
