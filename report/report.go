// Package report defines unwound's PC-only crash report, its JSON shape
// and its on-flash encoding: one zstd frame with the content checksum on,
// so `zstd -dc r.json.zst | jq .` works and corruption is detected.
// Readers decode with package decode (report/decode), kept apart so
// that the handler links no decoder.
//
// A report never carries memory contents: PCs, module identities, signal
// information, thread ids and names, the executable and (optionally) the
// command line. docs/report-format.md documents every field.
package report

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/unwound-dev/unwound/report/jsonlite"
)

// Version is the report schema version. Readers accept every version up to
// this one; fields are only ever added.
const Version = 1

// Suffix ends the name of every stored report file: a compressed JSON
// report, in the board's queue and in the host's store alike.
const Suffix = ".json.zst"

// Hex is an address, encoded in JSON as a "0x…" string so that 64-bit
// values survive JavaScript and jq intact.
type Hex uint64

// MarshalJSON encodes h as "0x…".
func (h Hex) MarshalJSON() ([]byte, error) {
	return []byte(`"0x` + strconv.FormatUint(uint64(h), 16) + `"`), nil
}

// UnmarshalJSON accepts "0x…" strings (and, leniently, plain numbers).
func (h *Hex) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
		if !strings.HasPrefix(s, "0x") && !strings.HasPrefix(s, "0X") {
			return fmt.Errorf("address %q: want a 0x-prefixed hex string", s)
		}
		v, err := strconv.ParseUint(s[2:], 16, 64)
		if err != nil {
			return fmt.Errorf("address %q: %w", s, err)
		}
		*h = Hex(v)
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("address %s: not a hex string or number", s)
	}
	*h = Hex(v)
	return nil
}

func (h Hex) String() string { return "0x" + strconv.FormatUint(uint64(h), 16) }

// Report is one crash.
type Report struct {
	Version     int    `json:"version"`
	ID          string `json:"id"`           // 128-bit random, hex
	Time        int64  `json:"time"`         // unix seconds, from the kernel's %t when given
	TimeTrusted bool   `json:"time_trusted"` // false when the clock looks unset (no RTC, before NTP)
	BootID      string `json:"boot_id,omitempty"`
	DeviceID    string `json:"device_id,omitempty"`
	Kernel      string `json:"kernel,omitempty"` // uname release
	Arch        string `json:"arch"`             // x86_64, aarch64, arm, riscv64
	// Release is the board's image, from os-release; Device holds what
	// the board's config says about it. Both are absent in reports from
	// handlers before they were added, and when there is nothing to say.
	Release *Release `json:"release,omitempty"`
	Device  *Device  `json:"device,omitempty"`

	Signal  Signal   `json:"signal"`
	PID     int      `json:"pid"`
	TID     int      `json:"tid"` // the crashing thread
	Comm    string   `json:"comm,omitempty"`
	Exe     string   `json:"exe,omitempty"`
	Cmdline []string `json:"cmdline,omitempty"` // only with handler.include_cmdline

	Modules []Module `json:"modules"`
	Threads []Thread `json:"threads"`

	// Partial is true when the report is known to be incomplete: the
	// deadline passed, the core was truncated, a thread cap was hit.
	Partial bool     `json:"partial,omitempty"`
	Errors  []string `json:"errors,omitempty"`
	// Dropped counts crashes that were not reported since the previous
	// report, by reason (rate_limit, queue_full, …).
	Dropped map[string]int `json:"dropped,omitempty"`

	Handler Handler `json:"handler"`

	// Container is where the process ran when that was not the handler's
	// own pid or mount namespace (a container): absent otherwise, and in
	// reports from handlers before it was added.
	Container *Container `json:"container,omitempty"`
}

// Container names the container a crashed process ran in: its cgroup (v2)
// path, which container runtimes name after the container, and the inode
// numbers of its pid and mount namespaces (/proc/<pid>/ns/*), which tell
// containers apart on one boot.
type Container struct {
	Cgroup string `json:"cgroup,omitempty"`
	PidNS  uint64 `json:"pid_ns,omitempty"`
	MntNS  uint64 `json:"mnt_ns,omitempty"`
}

// Release is the software the board runs: os-release(5)'s ID,
// VERSION_ID, IMAGE_ID, IMAGE_VERSION and BUILD_ID.
type Release struct {
	ID           string `json:"id,omitempty"`
	VersionID    string `json:"version_id,omitempty"`
	ImageID      string `json:"image_id,omitempty"`
	ImageVersion string `json:"image_version,omitempty"`
	BuildID      string `json:"build_id,omitempty"`
}

// Device is what the board's config says about the board.
type Device struct {
	// Attributes is device.attributes: a few short strings (hardware
	// revision, update channel), at most MaxAttributes of them.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Bounds of what a board describes itself with: the config refuses
// attributes beyond them, the handler cuts os-release values to
// MaxReleaseValue bytes, and readers refuse reports beyond them.
const (
	MaxAttributes     = 16
	MaxAttributeKey   = 32
	MaxAttributeValue = 64
	MaxReleaseValue   = 64
	// The config's ceilings of handler.max_threads and handler.max_frames:
	// no handler writes more.
	MaxThreads = 4096
	MaxFrames  = 65536
)

// Signal describes the fatal signal.
type Signal struct {
	Number    int    `json:"number"`
	Name      string `json:"name,omitempty"`
	Code      int    `json:"code"`
	CodeName  string `json:"code_name,omitempty"`
	FaultAddr *Hex   `json:"fault_addr,omitempty"` // SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP
}

// Module is one mapped ELF file (or the vDSO).
type Module struct {
	Path        string `json:"path"`
	BuildID     string `json:"build_id,omitempty"`
	BuildIDKind string `json:"build_id_kind,omitempty"` // "gnu", or "code" for the code-ID fallback
	Start       Hex    `json:"start"`
	End         Hex    `json:"end"`
	// A PC maps to the file's addresses as pc - runtime_offset + compiled_offset.
	RuntimeOffset  Hex    `json:"runtime_offset"`
	CompiledOffset Hex    `json:"compiled_offset"`
	Error          string `json:"error,omitempty"` // why the file could not be read
}

// FileAddr maps a runtime PC into the module file's own addresses (its
// p_vaddr numbering, what symbol tables and addr2line use).
func (m Module) FileAddr(pc Hex) uint64 {
	return uint64(pc) - uint64(m.RuntimeOffset) + uint64(m.CompiledOffset)
}

// Thread is one thread's trace, innermost frame first.
type Thread struct {
	TID        int     `json:"tid"`
	Name       string  `json:"name,omitempty"`
	Crashed    bool    `json:"crashed,omitempty"`
	Frames     []Frame `json:"frames"`
	StopReason string  `json:"stop_reason"`
	StopDetail string  `json:"stop_detail,omitempty"`
	// Elided frames were walked but dropped from the middle of a deep
	// recursion; they sit between Frames[ElidedAt-1] and Frames[ElidedAt].
	Elided   int `json:"elided,omitempty"`
	ElidedAt int `json:"elided_at,omitempty"`
}

// Frame is one PC. Frame 0, and frames interrupted by a signal, hold the
// exact PC (exact=true); the others hold return addresses, so symbolizers
// look up pc-1 for them, as gdb does.
type Frame struct {
	PC     Hex    `json:"pc"`
	Method string `json:"method"` // context, signal, cfi, ehabi, prologue, lr, fp, scan
	// Trust: high, medium or low (see docs/report-format.md); absent in
	// reports from handlers before it was added.
	Trust  string `json:"trust,omitempty"`
	Module int    `json:"module"`          // index into modules, -1 when in none
	Exact  bool   `json:"exact,omitempty"` // PC is not a return address
	Thumb  bool   `json:"thumb,omitempty"` // ARM32: Thumb state
	Note   string `json:"note,omitempty"`  // why this frame's method was chosen, when notable
	// Withheld: the unwinder found a "PC" outside every executable mapping
	// (a wild jump, a clobbered return address: a data or stack word). Its
	// value is not reported, PC is 0: it could be anything, a secret too.
	Withheld bool `json:"withheld,omitempty"`
}

// Handler says how the report was made.
type Handler struct {
	Version    string `json:"version"`
	Mode       string `json:"mode"` // live (/proc/<pid>/mem), stream (core stream), file (offline)
	DurationMS int64  `json:"duration_ms"`
	FrozenMS   int64  `json:"frozen_ms"` // how long the crashed process was held
	MaxRSSKiB  int64  `json:"max_rss_kib,omitempty"`
}

// Validate checks a decoded report's invariants: a reader must not trust a
// report from a board blindly.
func (r *Report) Validate() error {
	var errs []error
	if r.Version < 1 || r.Version > Version {
		errs = append(errs, fmt.Errorf("version %d: supported 1..%d", r.Version, Version))
	}
	if len(r.ID) != 32 {
		errs = append(errs, fmt.Errorf("id %q: want 32 hex digits", r.ID))
	} else if _, err := hex.DecodeString(r.ID); err != nil {
		errs = append(errs, fmt.Errorf("id %q: not hex", r.ID))
	}
	if r.Release != nil {
		for _, v := range []string{r.Release.ID, r.Release.VersionID, r.Release.ImageID, r.Release.ImageVersion, r.Release.BuildID} {
			if len(v) > MaxReleaseValue {
				errs = append(errs, fmt.Errorf("release value %.16q…: longer than %d bytes", v, MaxReleaseValue))
			}
		}
	}
	if r.Device != nil {
		if n := len(r.Device.Attributes); n > MaxAttributes {
			errs = append(errs, fmt.Errorf("device: %d attributes, at most %d", n, MaxAttributes))
		}
		for k, v := range r.Device.Attributes {
			if len(k) == 0 || len(k) > MaxAttributeKey || len(v) > MaxAttributeValue {
				errs = append(errs, fmt.Errorf("device attribute %.16q: key of 1..%d bytes, value of at most %d", k, MaxAttributeKey, MaxAttributeValue))
			}
		}
	}
	for i, m := range r.Modules {
		if m.End < m.Start {
			errs = append(errs, fmt.Errorf("module %d (%s): end %v below start %v", i, m.Path, m.End, m.Start))
		}
	}
	if len(r.Threads) > MaxThreads {
		errs = append(errs, fmt.Errorf("%d threads, at most %d", len(r.Threads), MaxThreads))
	}
	for i, t := range r.Threads {
		if len(t.Frames) > MaxFrames {
			errs = append(errs, fmt.Errorf("thread %d: %d frames, at most %d", i, len(t.Frames), MaxFrames))
			continue
		}
		for j, f := range t.Frames {
			if f.Module < -1 || f.Module >= len(r.Modules) {
				errs = append(errs, fmt.Errorf("thread %d frame %d: module index %d out of range", i, j, f.Module))
			}
			switch f.Trust {
			case "", "high", "medium", "low":
			default:
				errs = append(errs, fmt.Errorf("thread %d frame %d: trust %q", i, j, f.Trust))
			}
		}
		if t.Elided < 0 || t.ElidedAt < 0 || t.ElidedAt > len(t.Frames) {
			errs = append(errs, fmt.Errorf("thread %d: elided_at %d out of range", i, t.ElidedAt))
		}
	}
	return errors.Join(errs...)
}

// Crashed returns the crashed thread, or nil.
func (r *Report) Crashed() *Thread {
	for i := range r.Threads {
		if r.Threads[i].Crashed {
			return &r.Threads[i]
		}
	}
	return nil
}

// MarshalIndent is the canonical pretty JSON form.
func (r *Report) MarshalIndent() ([]byte, error) {
	return jsonlite.MarshalIndent(r, "", "  ")
}

// Summary is the head of a text rendering: the report, the signal, the
// program, and what went wrong while making it.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "report %s: pid %d (%s) %s", r.ID, r.PID, r.Comm, r.Signal.Name)
	if r.Signal.CodeName != "" {
		fmt.Fprintf(&b, " %s", r.Signal.CodeName)
	}
	if r.Signal.FaultAddr != nil {
		fmt.Fprintf(&b, " at %v", *r.Signal.FaultAddr)
	}
	fmt.Fprintf(&b, "\n  exe %s, %s, kernel %s\n", r.Exe, r.Arch, r.Kernel)
	if r.Partial {
		b.WriteString("  PARTIAL report\n")
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	for reason, n := range r.Dropped {
		fmt.Fprintf(&b, "  %d crash(es) not reported before this one: %s\n", n, reason)
	}
	return b.String()
}
