package sentry

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/internal/version"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/report/zstdenc"
)

// Event is the subset of Sentry's event payload that unwound fills
// (develop.sentry.dev, "Event Payloads"; Relay's event.schema.json).
type Event struct {
	EventID     string            `json:"event_id"`
	Timestamp   float64           `json:"timestamp"`
	Platform    string            `json:"platform"`
	Level       string            `json:"level"`
	Logger      string            `json:"logger,omitempty"`
	Release     string            `json:"release,omitempty"`
	Dist        string            `json:"dist,omitempty"`
	ServerName  string            `json:"server_name,omitempty"`
	Fingerprint []string          `json:"fingerprint,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	User        *User             `json:"user,omitempty"`
	Contexts    map[string]any    `json:"contexts,omitempty"`
	Exception   *Exceptions       `json:"exception,omitempty"`
	Threads     *Threads          `json:"threads,omitempty"`
	DebugMeta   *DebugMeta        `json:"debug_meta,omitempty"`
	Extra       map[string]any    `json:"extra,omitempty"`
	SDK         SDK               `json:"sdk"`
}

// User is Sentry's user interface; unwound sets the device id, so that
// Sentry's "users affected" counts devices.
type User struct {
	ID string `json:"id"`
}

// SDK names the client.
type SDK struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Exceptions is the exception interface.
type Exceptions struct {
	Values []Exception `json:"values"`
}

// Exception carries the fatal signal.
type Exception struct {
	Type       string      `json:"type"`
	Value      string      `json:"value,omitempty"`
	ThreadID   *ThreadID   `json:"thread_id,omitempty"`
	Mechanism  *Mechanism  `json:"mechanism,omitempty"`
	Stacktrace *Stacktrace `json:"stacktrace,omitempty"`
}

// Mechanism says how the crash was caught: a POSIX signal.
type Mechanism struct {
	Type    string         `json:"type"`
	Handled bool           `json:"handled"`
	Meta    *MechanismMeta `json:"meta,omitempty"`
}

// MechanismMeta holds the signal.
type MechanismMeta struct {
	Signal *Signal `json:"signal,omitempty"`
}

// Signal is Sentry's PosixSignal.
type Signal struct {
	Number   int    `json:"number"`
	Code     *int   `json:"code,omitempty"`
	Name     string `json:"name,omitempty"`
	CodeName string `json:"code_name,omitempty"`
}

// Threads is the threads interface.
type Threads struct {
	Values []Thread `json:"values"`
}

// ThreadID is a thread id: a number, or a string when it is not one
// Sentry takes as a number (negative, from a damaged report).
type ThreadID int

// MarshalJSON writes Sentry's ThreadId: an unsigned integer or a string.
func (id ThreadID) MarshalJSON() ([]byte, error) {
	if id < 0 {
		return []byte(`"` + strconv.Itoa(int(id)) + `"`), nil
	}
	return []byte(strconv.Itoa(int(id))), nil
}

// Thread is one thread with its stack trace.
type Thread struct {
	ID         ThreadID    `json:"id"`
	Name       string      `json:"name,omitempty"`
	Crashed    bool        `json:"crashed"`
	Current    bool        `json:"current"`
	Stacktrace *Stacktrace `json:"stacktrace,omitempty"`
}

// Stacktrace holds frames oldest call first, as Sentry wants them.
type Stacktrace struct {
	Frames []Frame `json:"frames"`
	// InstructionAddrAdjustment tells Sentry which addresses are
	// return addresses (see adjust).
	InstructionAddrAdjustment string `json:"instruction_addr_adjustment,omitempty"`
}

// Frame is one stack frame.
type Frame struct {
	Function        string `json:"function,omitempty"`
	Symbol          string `json:"symbol,omitempty"` // the linkage name, when it differs
	Filename        string `json:"filename,omitempty"`
	AbsPath         string `json:"abs_path,omitempty"`
	Lineno          int    `json:"lineno,omitempty"`
	Colno           int    `json:"colno,omitempty"`
	Package         string `json:"package,omitempty"` // the module's path on the board
	InstructionAddr string `json:"instruction_addr,omitempty"`
	AddrMode        string `json:"addr_mode,omitempty"`
	InApp           *bool  `json:"in_app,omitempty"`
}

// DebugMeta lists the loaded images.
type DebugMeta struct {
	Images []Image `json:"images"`
}

// Image is a native debug image of type elf.
type Image struct {
	Type        string `json:"type"`
	CodeFile    string `json:"code_file"`
	CodeID      string `json:"code_id,omitempty"`
	DebugID     string `json:"debug_id"`
	ImageAddr   string `json:"image_addr"`
	ImageSize   uint64 `json:"image_size"`
	ImageVMAddr string `json:"image_vmaddr,omitempty"`
	Arch        string `json:"arch,omitempty"`
}

// Input is one stored report and what the collector knows about it.
type Input struct {
	Report *report.Report
	// Raw is the report as stored (zstd or JSON), when at hand: its
	// release and device objects become the event's release and tags.
	Raw []byte
	// Symbols, when the collector symbolized the report, name the
	// frames; without them Sentry symbolicates from its own debug files.
	Symbols *symbolize.Result
	// Signature is the collector's crash signature: the event's
	// fingerprint, so that Sentry groups as the collector does.
	Signature string
	// Received is when the report arrived: the event's time when the
	// board's clock was not set (report.time_trusted false).
	Received time.Time
}

// eventNamespace is the UUID namespace (RFC 4122 §4.3) of event ids made
// from report ids.
var eventNamespace = [16]byte{0x93, 0x0d, 0xe3, 0x0e, 0x87, 0xf2, 0x41, 0xf1, 0xb9, 0xc2, 0x19, 0x21, 0xb0, 0xde, 0x2b, 0x48}

// EventID is the event id of a report id: a name-based (version 5) UUID,
// as 32 hex digits. The same report always makes the same event, and
// Sentry drops an event whose id it already has, so a report resent
// after a crash between Sentry's answer and the journal still shows once.
func EventID(reportID string) string {
	h := sha1.New()
	h.Write(eventNamespace[:])
	h.Write([]byte(strings.ToLower(reportID)))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return hex.EncodeToString(u[:])
}

// meta is what the report carries beyond report.Report on this branch:
// the board's release (os-release) and device attributes.
type meta struct {
	Release *struct {
		ID           string `json:"id"`
		VersionID    string `json:"version_id"`
		ImageID      string `json:"image_id"`
		ImageVersion string `json:"image_version"`
		BuildID      string `json:"build_id"`
	} `json:"release"`
	Device *struct {
		Attributes map[string]string `json:"attributes"`
	} `json:"device"`
}

// NewEvent converts one report into a Sentry native event.
func NewEvent(in Input) (*Event, error) {
	r := in.Report
	if r == nil {
		return nil, fmt.Errorf("sentry: no report")
	}
	if len(r.ID) != 32 {
		return nil, fmt.Errorf("sentry: report id %q: want 32 hex digits", r.ID)
	}
	ev := &Event{
		EventID:  EventID(r.ID),
		Platform: "native",
		Level:    "fatal",
		Logger:   "unwound",
		SDK:      SDK{Name: "unwound", Version: version.Version},
		Tags:     map[string]string{},
		Contexts: map[string]any{},
		Extra:    map[string]any{},
	}
	switch {
	case r.TimeTrusted && r.Time > 0:
		ev.Timestamp = float64(r.Time)
	case !in.Received.IsZero():
		ev.Timestamp = float64(in.Received.UnixMilli()) / 1000
	default:
		ev.Timestamp = float64(time.Now().UnixMilli()) / 1000
	}
	if in.Signature != "" {
		ev.Fingerprint = []string{in.Signature}
	}
	program := r.Comm
	if r.Exe != "" {
		program = path.Base(r.Exe)
	}
	ev.tag("report_id", r.ID)
	ev.tag("device_id", r.DeviceID)
	ev.tag("program", program)
	ev.tag("signal", report.SignalName(r.Signal.Number))
	ev.tag("arch", r.Arch)
	if r.DeviceID != "" {
		ev.User = &User{ID: r.DeviceID}
		ev.ServerName = r.DeviceID
	}
	osc := map[string]any{"name": "Linux"}
	if r.Kernel != "" {
		osc["version"] = r.Kernel
		osc["kernel_version"] = r.Kernel
	}
	ev.Contexts["os"] = osc
	ev.Contexts["device"] = map[string]any{"arch": sentryArch(r.Arch)}
	if len(in.Raw) > 0 {
		// The report itself is decoded already: a release that cannot
		// be read costs the release, not the event.
		if err := ev.addMeta(in.Raw, osc); err != nil {
			ev.Extra["release_error"] = err.Error()
		}
	}
	ev.Extra["report_id"] = r.ID
	ev.Extra["pid"] = r.PID
	if r.Exe != "" {
		ev.Extra["exe"] = r.Exe
	}
	if r.BootID != "" {
		ev.Extra["boot_id"] = r.BootID
	}
	ev.Extra["handler"] = map[string]any{"version": r.Handler.Version, "mode": r.Handler.Mode}
	if r.Partial {
		ev.Extra["partial"] = true
	}
	if len(r.Errors) > 0 {
		ev.Extra["errors"] = r.Errors
	}
	if len(r.Dropped) > 0 {
		ev.Extra["dropped_before"] = r.Dropped
	}

	exe := exeModule(r)
	images, err := images(r)
	if err != nil {
		return nil, err
	}
	if len(images) > 0 {
		ev.DebugMeta = &DebugMeta{Images: images}
	}
	stops := map[string]string{}
	ev.Threads = &Threads{Values: []Thread{}}
	for i, t := range r.Threads {
		var sym []symbolize.Frame
		if in.Symbols != nil && i < len(in.Symbols.Threads) && len(in.Symbols.Threads[i].Frames) == len(t.Frames) {
			sym = in.Symbols.Threads[i].Frames
		}
		st := stacktrace(r, t, sym, exe)
		ev.Threads.Values = append(ev.Threads.Values, Thread{ID: ThreadID(t.TID), Name: t.Name, Crashed: t.Crashed, Current: t.Crashed, Stacktrace: st})
		stop := t.StopReason
		if t.StopDetail != "" {
			stop += ": " + t.StopDetail
		}
		stops[strconv.Itoa(t.TID)] = stop
	}
	ev.Extra["stop_reasons"] = stops

	sig := r.Signal
	name := sig.Name
	if name == "" {
		name = report.SignalName(sig.Number)
	}
	code := sig.Code
	ex := Exception{
		Type:  name,
		Value: signalValue(r),
		Mechanism: &Mechanism{Type: "signalhandler", Handled: false, Meta: &MechanismMeta{Signal: &Signal{
			Number: sig.Number, Code: &code, Name: name, CodeName: sig.CodeName,
		}}},
	}
	if c := r.Crashed(); c != nil {
		tid := ThreadID(c.TID)
		ex.ThreadID = &tid
		for i := range r.Threads {
			if &r.Threads[i] == c {
				ex.Stacktrace = ev.Threads.Values[i].Stacktrace
			}
		}
	}
	ev.Exception = &Exceptions{Values: []Exception{ex}}
	return ev, nil
}

// signalValue is the exception's value: the code and the fault address.
func signalValue(r *report.Report) string {
	s := r.Signal
	var b strings.Builder
	cn := s.CodeName
	if cn == "" {
		cn = report.CodeName(s.Number, s.Code)
	}
	if cn != "" {
		fmt.Fprintf(&b, "%s (code %d)", cn, s.Code)
	} else {
		fmt.Fprintf(&b, "code %d", s.Code)
	}
	if s.FaultAddr != nil {
		fmt.Fprintf(&b, " at %v", *s.FaultAddr)
	}
	prog := r.Comm
	if r.Exe != "" {
		prog = r.Exe
	}
	if prog != "" {
		fmt.Fprintf(&b, " in %s", prog)
	}
	return b.String()
}

// tag sets a tag within Sentry's limits (keys of at most 32 characters,
// values of at most 200, no line breaks); empty values are left out.
func (ev *Event) tag(k, v string) {
	v = strings.TrimSpace(strings.Map(func(c rune) rune {
		if c == '\n' || c == '\r' {
			return ' '
		}
		return c
	}, v))
	if k == "" || v == "" {
		return
	}
	if len(k) > 32 {
		k = k[:32]
	}
	if len(v) > 200 {
		v = v[:200]
	}
	ev.Tags[k] = v
}

var (
	zdecOnce sync.Once
	zdec     *zstd.Decoder
	zdecErr  error
)

// reportJSON is the JSON of a stored report (zstd or plain). One
// decoder serves every call (DecodeAll is safe for concurrent use):
// decode.JSON makes a new one, with its window, per report.
func reportJSON(raw []byte) ([]byte, error) {
	if !bytes.HasPrefix(raw, []byte(zstdenc.Magic)) {
		return raw, nil
	}
	zdecOnce.Do(func() {
		zdec, zdecErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(decode.MaxDecoded))
	})
	if zdecErr != nil {
		return nil, zdecErr
	}
	return zdec.DecodeAll(raw, nil)
}

// addMeta reads the release and device objects from the raw report.
func (ev *Event) addMeta(raw []byte, osc map[string]any) error {
	js, err := reportJSON(raw)
	if err != nil {
		return fmt.Errorf("sentry: report: %w", err)
	}
	var m meta
	if err := json.Unmarshal(js, &m); err != nil {
		return fmt.Errorf("sentry: report JSON: %w", err)
	}
	if rel := m.Release; rel != nil {
		ev.tag("os.id", rel.ID)
		ev.tag("os.version_id", rel.VersionID)
		ev.tag("image.id", rel.ImageID)
		ev.tag("image.version", rel.ImageVersion)
		ev.tag("build_id", rel.BuildID)
		// Sentry's release is "package@version": the image when the
		// board says which, else the distribution.
		pkg, ver := rel.ImageID, rel.ImageVersion
		if pkg == "" || ver == "" {
			pkg, ver = rel.ID, rel.VersionID
		}
		if pkg != "" && ver != "" {
			ev.Release = releaseName(pkg + "@" + ver)
		}
		if rel.BuildID != "" {
			ev.Dist = releaseName(rel.BuildID)
		}
		if rel.ID != "" || rel.VersionID != "" {
			osc["distribution"] = map[string]any{"name": rel.ID, "version": rel.VersionID}
		}
		if rel.BuildID != "" {
			osc["build"] = rel.BuildID
		}
	}
	if m.Device != nil {
		for k, v := range m.Device.Attributes {
			if _, ours := ev.Tags[k]; !ours {
				ev.tag(k, v)
			}
		}
	}
	return nil
}

// releaseName keeps a release or dist within what Sentry accepts: no
// slashes or line breaks, at most 200 characters (64 for dist).
func releaseName(s string) string {
	s = strings.Map(func(c rune) rune {
		switch c {
		case '/', '\\', '\n', '\r', '\t':
			return '-'
		}
		return c
	}, s)
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// sentryArch names an architecture as Sentry does.
func sentryArch(a string) string {
	switch a {
	case "aarch64":
		return "arm64"
	}
	return a
}

// exeModule is the index of the program's own module, or -1.
func exeModule(r *report.Report) int {
	for i, m := range r.Modules {
		if r.Exe != "" && m.Path == r.Exe {
			return i
		}
	}
	return -1
}

// images lists the modules that have an identifier as ELF debug images.
// image_addr is where the module's first mapping starts; image_vmaddr is
// the file address at that point, so that Sentry's instruction_addr -
// image_addr + image_vmaddr is the address the report's own mapping
// (pc - runtime_offset + compiled_offset) gives.
func images(r *report.Report) ([]Image, error) {
	var out []Image
	for _, m := range r.Modules {
		if m.BuildID == "" {
			continue // nothing Sentry could look a debug file up by
		}
		did, err := DebugID(m.BuildID)
		if err != nil {
			return nil, fmt.Errorf("sentry: module %s: %w", m.Path, err)
		}
		img := Image{
			Type:      "elf",
			CodeFile:  m.Path,
			DebugID:   did,
			ImageAddr: report.Hex(m.Start).String(),
			ImageSize: uint64(m.End - m.Start),
			Arch:      sentryArch(r.Arch),
		}
		// The handler's fallback code id (build_id_kind "code") is
		// unwound's own hash: Sentry computes a different one for files
		// without a build ID, so it is no code_id Sentry can match.
		if m.BuildIDKind != "code" {
			img.CodeID = strings.ToLower(m.BuildID)
		}
		if vm := m.FileAddr(m.Start); vm != 0 {
			img.ImageVMAddr = report.Hex(vm).String()
		}
		out = append(out, img)
	}
	return out, nil
}

// exact reports whether frame i of t holds an exact PC rather than a
// return address: frame 0, frames interrupted by a signal, and a signal
// trampoline's frame (nothing called it; symbolize does the same).
func exact(t report.Thread, i int) bool {
	f := t.Frames[i]
	return f.Exact || i+1 < len(t.Frames) && t.Frames[i+1].Method == "signal"
}

// stacktrace converts one thread's frames, oldest call first. Sentry
// subtracts one from return addresses before it looks them up, as gdb
// does, by instruction_addr_adjustment: "all_but_first" is the usual
// case; a thread with a signal frame inside has exact PCs further down,
// so its return addresses are adjusted here and Sentry is told "none".
func stacktrace(r *report.Report, t report.Thread, sym []symbolize.Frame, exe int) *Stacktrace {
	st := &Stacktrace{Frames: []Frame{}}
	usual := len(t.Frames) > 0 && exact(t, 0)
	for i := 1; i < len(t.Frames) && usual; i++ {
		usual = !exact(t, i)
	}
	preAdjust := !usual
	if usual {
		st.InstructionAddrAdjustment = "all_but_first"
	} else {
		st.InstructionAddrAdjustment = "none"
	}
	for i := len(t.Frames) - 1; i >= 0; i-- {
		f := t.Frames[i]
		pc := uint64(f.PC)
		if preAdjust && !exact(t, i) && pc > 0 {
			pc--
		}
		base := Frame{InstructionAddr: report.Hex(pc).String()}
		inApp := f.Module >= 0 && f.Module == exe
		base.InApp = &inApp
		if f.Module >= 0 && f.Module < len(r.Modules) {
			base.Package = r.Modules[f.Module].Path
		}
		if f.Withheld {
			base.InstructionAddr = "0x0"
			base.Function = "<pc withheld: not in an executable mapping>"
		}
		var locs []symbolize.Location
		if sym != nil {
			locs = sym[i].Locations
		}
		if len(locs) == 0 {
			st.Frames = append(st.Frames, base)
		}
		// Locations are innermost first; Sentry wants the outermost
		// (the function the code belongs to) first, then the calls
		// inlined into it.
		for j := len(locs) - 1; j >= 0; j-- {
			l := locs[j]
			fr := base
			fr.Function = l.Function
			fr.Symbol = l.Mangled
			if l.File != "" {
				fr.Filename = path.Base(l.File)
				fr.AbsPath = l.File
			}
			fr.Lineno = l.Line
			fr.Colno = l.Column
			st.Frames = append(st.Frames, fr)
		}
		if t.Elided > 0 && i == t.ElidedAt && i > 0 {
			// The elided frames sat between Frames[i-1] and Frames[i].
			no := false
			st.Frames = append(st.Frames, Frame{Function: fmt.Sprintf("<%d frames elided>", t.Elided), InApp: &no})
		}
	}
	return st
}

// Payload is the event as JSON, an envelope item's payload.
func (ev *Event) Payload() ([]byte, error) { return json.Marshal(ev) }
