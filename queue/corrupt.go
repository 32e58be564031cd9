package queue

import (
	"errors"
	"fmt"
)

// ErrCorrupt is matched (errors.Is) by every *CorruptError.
var ErrCorrupt = errors.New("corrupt entry")

// CorruptError is an entry that failed Options.Check. Read has moved it
// to the quarantine when Quarantined is set.
type CorruptError struct {
	Name        string
	Err         error
	Quarantined bool
}

func (e *CorruptError) Error() string {
	s := fmt.Sprintf("queue: %s: corrupt: %v", e.Name, e.Err)
	if e.Quarantined {
		s += " (moved to " + QuarantineDir + "/)"
	}
	return s
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }
