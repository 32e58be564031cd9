package unwind

// Trust says how far a frame can be relied on.
//
// High: the thread's registers, DWARF CFI, ARM EHABI, a kernel signal
// frame: the compiler's or the kernel's own record of the frame. Medium:
// prologue analysis, a frame-pointer record or the link register, each
// checked by call-site validation. Low: a validated stack scan, or a
// heuristic step whose call site could not be checked against the callee
// (an indirect call). A frame is never trusted more than the frame it was
// unwound from: its registers came from there.
type Trust uint8

// Trust levels, lowest first.
const (
	TrustLow Trust = 1 + iota
	TrustMedium
	TrustHigh
)

func (t Trust) String() string {
	switch t {
	case TrustLow:
		return "low"
	case TrustMedium:
		return "medium"
	case TrustHigh:
		return "high"
	}
	return ""
}
