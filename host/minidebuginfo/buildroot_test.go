package minidebuginfo

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testutil"
)

// The Buildroot hook's script (BR2_PACKAGE_UNWOUND_MINIDEBUGINFO) on a
// target directory holding real cross binaries, unstripped as packages
// install them: it strips them as Buildroot strips them and adds our
// MiniDebugInfo, which Buildroot's own strip, run after it, keeps.
func TestBuildrootHookOnATargetDir(t *testing.T) {
	full, _ := build(t, "arm-linux-gnueabihf-")
	tool := filepath.Join(t.TempDir(), "unwound")
	testutil.Run(t, "go", "build", "-o", tool, "../../cmd/unwound")
	target := t.TempDir()
	prog := filepath.Join(target, "usr/bin/prog")
	os.MkdirAll(filepath.Dir(prog), 0o755)
	testutil.CopyFile(t, full, prog)
	script := filepath.Join(target, "usr/bin/script.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)

	strip := "arm-linux-gnueabihf-strip --remove-section=.comment --remove-section=.note"
	cmd := exec.Command("sh", "../../buildroot/package/unwound/minidebuginfo.sh", prog, script)
	cmd.Env = append(os.Environ(), "UNWOUND="+tool, "OBJCOPY=arm-linux-gnueabihf-objcopy", "XZ=xz", "STRIPCMD="+strip)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("minidebuginfo.sh: %v\n%s", err, out)
	}
	// Buildroot's strip comes after the hook.
	testutil.Run(t, "sh", "-c", strip+" "+prog)
	f, err := elf.Open(prog)
	if err != nil {
		t.Fatal(err)
	}
	if f.Section(".symtab") != nil || f.Section(".debug_info") != nil {
		t.Error("the program was not stripped")
	}
	f.Close()
	check(t, full, prog, true)
	if b, _ := os.ReadFile(script); string(b) != "#!/bin/sh\necho hi\n" {
		t.Error("the script changed")
	}
}
