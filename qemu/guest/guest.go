// Package guest is what the core lab's host and its guest init share: the
// plan a guest runs and the framing of files it ships out.
//
// The guest writes files to a virtio serial port; QEMU appends everything
// to a file on the host. Each file is a header line and its bytes:
//
//	UNWOUND-FILE <name> <size> <sha256 hex>\n<size bytes>\n
//
// Names are paths without spaces. The host verifies every checksum.
package guest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Plan is what the guest init does, in order; it is /plan.json in the
// initramfs.
type Plan struct {
	// Modules are kernel modules (initramfs paths) loaded in order before
	// anything else, for kernels that build the virtio console as a
	// module (Debian's).
	Modules []string `json:"modules,omitempty"`
	Steps   []Step   `json:"steps"`
}

// Step is one action. Exactly one of the action fields is set.
type Step struct {
	// Write puts Data into the file Write (e.g. /proc/sys/kernel/core_pattern).
	Write string `json:"write,omitempty"`
	Data  string `json:"data,omitempty"`
	// Run runs a command (with RLIMIT_CORE unlimited) and waits for it;
	// its output goes to the console. Crashing is expected and not an
	// error unless MustSucceed.
	Run         []string `json:"run,omitempty"`
	MustSucceed bool     `json:"must_succeed,omitempty"`
	// Start starts a command in the background (a server the crashes
	// need, such as the coredump socket server) and goes on; its output
	// goes to the console. It is not stopped before the guest powers off.
	Start []string `json:"start,omitempty"`
	// CorePattern sets core_pattern to the output of this command (the
	// handler's --core-pattern).
	CorePattern []string `json:"core_pattern,omitempty"`
	// WaitFiles waits until Count files match the glob (a core_pattern
	// helper finishes after the crashed process is reaped).
	WaitFiles string `json:"wait_files,omitempty"`
	Count     int    `json:"count,omitempty"`
	// Ship sends every file matching the glob to the host, named As/<base>
	// (or by its path when As is empty).
	Ship string `json:"ship,omitempty"`
	As   string `json:"as,omitempty"`
	// Remove deletes each shipped file once written to the port (cores
	// shipped crash by crash keep the guest's RAM free).
	Remove bool `json:"remove,omitempty"`
	// Mkdir creates a directory (and its parents).
	Mkdir string `json:"mkdir,omitempty"`
	// Mount mounts a filesystem: Mount is the target, FSType its type.
	Mount  string `json:"mount,omitempty"`
	FSType string `json:"fstype,omitempty"`
}

// Marker is the console line that says the guest finished its plan; QEMU
// exits 0 on a kernel panic too, so success is judged by this line.
const Marker = "UNWOUND-GUEST-DONE"

const header = "UNWOUND-FILE "

// WriteFile frames one file.
func WriteFile(w io.Writer, name string, data []byte) error {
	if name == "" || strings.ContainsAny(name, " \n") {
		return fmt.Errorf("ship: bad name %q", name)
	}
	sum := sha256.Sum256(data)
	if _, err := fmt.Fprintf(w, "%s%s %d %s\n", header, name, len(data), hex.EncodeToString(sum[:])); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	_, err := w.Write([]byte{'\n'})
	return err
}

// ReadFiles parses a shipped stream; every checksum must match. A stream
// cut in the middle of a file is an error naming it.
func ReadFiles(r io.Reader) (map[string][]byte, error) {
	br := bufio.NewReader(r)
	files := map[string][]byte{}
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("ship: truncated header %q", line)
		}
		if !strings.HasPrefix(line, header) {
			return files, fmt.Errorf("ship: unexpected line %q", strings.TrimSpace(line))
		}
		f := strings.Fields(line[len(header):])
		if len(f) != 3 {
			return files, fmt.Errorf("ship: bad header %q", strings.TrimSpace(line))
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n < 0 || n > 1<<31 {
			return files, fmt.Errorf("ship: %s: bad size %q", f[0], f[1])
		}
		// Grow with the bytes that arrive, not with what the header
		// claims: a cut stream must not cost a 2 GiB allocation.
		var buf bytes.Buffer
		if got, err := io.CopyN(&buf, br, n); err != nil {
			return files, fmt.Errorf("ship: %s: cut after %d of %d bytes", f[0], got, n)
		}
		data := buf.Bytes()
		if nl, err := br.ReadByte(); err != nil || nl != '\n' {
			return files, fmt.Errorf("ship: %s: no newline after the data", f[0])
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != f[2] {
			return files, fmt.Errorf("ship: %s: checksum mismatch", f[0])
		}
		files[f[0]] = data
	}
}
