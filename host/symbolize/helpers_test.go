package symbolize

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/offline"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// a2l is one line pair of addr2line -f -i output.
type a2l struct{ fn, pos string }

// addr2line runs `addr2line -a -f -i -C -e file` on addrs.
func addr2line(t testing.TB, file string, addrs []uint64) [][]a2l {
	t.Helper()
	testutil.Need(t, "addr2line")
	if len(addrs) == 0 {
		return nil
	}
	args := []string{"-a", "-f", "-i", "-C", "-e", file}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	out := testutil.Run(t, "addr2line", args...)
	var res [][]a2l
	sc := bufio.NewScanner(bytes.NewReader(out))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	for i := 0; i < len(lines); {
		if !strings.HasPrefix(lines[i], "0x") {
			t.Fatalf("addr2line output: %q", lines[i])
		}
		i++
		var group []a2l
		for i+1 < len(lines) && !strings.HasPrefix(lines[i], "0x") {
			pos := lines[i+1]
			if j := strings.Index(pos, " (discriminator"); j >= 0 {
				pos = pos[:j]
			}
			group = append(group, a2l{lines[i], pos})
			i += 2
		}
		res = append(res, group)
	}
	if len(res) != len(addrs) {
		t.Fatalf("addr2line: %d results for %d addresses", len(res), len(addrs))
	}
	return res
}

// sameAsAddr2line says how ours differs from addr2line's answer, or "".
func sameAsAddr2line(ours []Location, theirs []a2l) string {
	if len(theirs) == 1 && theirs[0].fn == "??" && strings.HasPrefix(theirs[0].pos, "??:") {
		theirs = nil
	}
	var o []string
	for i, l := range ours {
		pos := "??:?"
		if l.File == "" && i < len(theirs) && strings.HasSuffix(theirs[i].pos, ":?") {
			// No line information: addr2line names the object file
			// from the symbol table's STT_FILE entry (pthread_kill.o).
			pos = theirs[i].pos
		}
		if l.File != "" {
			pos = l.File + ":" + strconv.Itoa(l.Line)
			if l.Line == 0 {
				pos = l.File + ":?"
			}
		}
		fn := l.Function
		if fn == "" {
			fn = "??"
		}
		o = append(o, fn+" @ "+pos)
	}
	var w []string
	for _, l := range theirs {
		w = append(w, l.fn+" @ "+l.pos)
	}
	if strings.Join(o, "\n") == strings.Join(w, "\n") {
		return ""
	}
	return fmt.Sprintf("ours:\n    %s\naddr2line:\n    %s", strings.Join(o, "\n    "), strings.Join(w, "\n    "))
}

// crashReport makes the report of one fixture crash, as the handler does
// from the core with the stripped program.
func crashReport(t testing.TB, b fixture.Binary, scenario string) *report.Report {
	t.Helper()
	return offline.Fixture(t, b, scenario, fixture.Sysroot(b.Arch))
}

// objcopy runs binutils' objcopy (multi-target on Debian).
func objcopy(t testing.TB, args ...string) {
	t.Helper()
	testutil.Need(t, "objcopy")
	testutil.Run(t, "objcopy", args...)
}

// onlyKeepDebug makes a separate debug file of an unstripped binary.
func onlyKeepDebug(t testing.TB, unstripped, out string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	objcopy(t, "--only-keep-debug", unstripped, out)
}

// buildIDTree lays out debug files as DIR/.build-id/xx/rest.debug.
func buildIDTree(t testing.TB, dir string, unstripped ...string) {
	t.Helper()
	for _, u := range unstripped {
		e, err := openELF(u)
		if err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("%x", e.buildID)
		e.Close()
		if len(id) < 3 {
			t.Fatalf("%s has no build id", u)
		}
		onlyKeepDebug(t, u, filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug"))
	}
}

// stripParams drops a trailing C++ parameter list: gdb names DWARF
// functions without one, addr2line -C with one.
func stripParams(s string) string {
	if i := strings.Index(s, " [clone "); i >= 0 {
		s = s[:i] // thrower(int) [clone .cold]: gdb says thrower
	}
	s = strings.TrimSuffix(s, " const")
	if !strings.HasSuffix(s, ")") || strings.HasSuffix(s, "operator()") {
		return s
	}
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return s[:i]
			}
		}
	}
	return s
}
