package guest

import (
	"fmt"
	"os"
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
