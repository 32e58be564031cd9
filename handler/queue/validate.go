package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// MaxDecoded bounds an entry's decoded size (a real report is a few KiB).
const MaxDecoded = 16 << 20

// ErrCorrupt is matched (errors.Is) by every *CorruptError.
var ErrCorrupt = errors.New("corrupt entry")

// CorruptError is an entry that failed validation. Read has moved it to
// the quarantine when Quarantined is set.
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

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

var (
	decOnce sync.Once
	dec     *zstd.Decoder
	decErr  error
)

func decoder() (*zstd.Decoder, error) {
	decOnce.Do(func() {
		dec, decErr = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(MaxDecoded),
		)
	})
	return dec, decErr
}

// Validate checks an entry's bytes: one zstd frame that carries a content
// checksum (RFC 8878 §3.1.1.1.1, Content_Checksum_flag), decodes with that
// checksum matching, and holds JSON. This is what a torn write, a block
// of zeros after a power cut or a bit flip on flash fails.
func Validate(data []byte) error {
	if !bytes.HasPrefix(data, zstdMagic) {
		return errors.New("not a zstd frame")
	}
	if len(data) < 5 || data[4]&0x04 == 0 {
		return errors.New("zstd frame without a content checksum")
	}
	d, err := decoder()
	if err != nil {
		return err
	}
	js, err := d.DecodeAll(data, nil)
	if err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	if !json.Valid(js) {
		return errors.New("decoded bytes are not JSON")
	}
	return nil
}
