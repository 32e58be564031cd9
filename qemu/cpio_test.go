package qemu

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// The archive must read back with the standard cpio tool, as the kernel
// would unpack it.
func TestInitramfsReadsBack(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("cpio not installed")
	}
	r := NewInitramfs()
	r.File("/init", 0o755, []byte("#!/bin/sh\n"))
	r.File("/etc/unwound/unwound.toml", 0o644, []byte("[queue]\n"))
	r.Symlink("/lib64", "lib")
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	if b.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-aligned", b.Len())
	}
	cmd := exec.Command("cpio", "-it", "-v")
	cmd.Stdin = &b
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"dev/console", "dev/null", "init", "etc/unwound/unwound.toml", "lib64 -> lib", "crw-------"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("cpio listing lacks %q:\n%s", want, out)
		}
	}
}
