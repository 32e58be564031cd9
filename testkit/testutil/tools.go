package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

// Need skips the test unless every tool is on PATH: the host tests drive
// the real binutils, compilers and debuggers, which scripts/deps.sh
// installs and a bare machine lacks.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh)", tool)
		}
	}
}

// Run runs a tool and returns its output (stdout and stderr); the test
// fails with that output when the tool does.
func Run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}
