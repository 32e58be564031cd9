package guest

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Console writes a lab program's facts to the console, one line per fact
// with a prefix the host parses ("HL-", "QL-"). Each line goes out in a
// single write, so lines of concurrent goroutines never interleave.
type Console struct {
	Prefix string
	mu     sync.Mutex
}

// Say writes one line.
func (c *Console) Say(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	os.Stdout.Write([]byte(c.Prefix + fmt.Sprintf(format, args...) + "\n"))
}

// Fail writes a FAIL line and exits with status 1.
func (c *Console) Fail(format string, args ...any) {
	c.Say("FAIL "+format, args...)
	os.Exit(1)
}

// Facts is the host's side of Say: the console's lines holding prefix, each
// from just after the prefix (the kernel's own output can precede it on
// the line), without surrounding space.
func Facts(console, prefix string) []string {
	var out []string
	for _, l := range strings.Split(console, "\n") {
		if i := strings.Index(l, prefix); i >= 0 {
			out = append(out, strings.TrimSpace(l[i+len(prefix):]))
		}
	}
	return out
}
