package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
	"github.com/unwound-dev/unwound/handler/jsonlite"
)

// MaxDecoded bounds a decoded report: a real one is a few KiB; this is
// generous for 64 threads × 256 frames and protects readers from bombs.
const MaxDecoded = 16 << 20

// zstd frame magic, to tell compressed from plain JSON.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Encode returns r as one zstd frame with the content checksum on. The
// encoder settings keep its allocation near 0.3 MiB (DESIGN §6): one
// goroutine, a 32 KiB window, the low-memory mode, the fastest level.
func Encode(r *Report) ([]byte, error) {
	js, err := jsonlite.Marshal(r)
	if err != nil {
		return nil, err
	}
	return Compress(js)
}

// Compress wraps plain bytes in one checksummed zstd frame.
func Compress(p []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(32<<10),
		zstd.WithLowerEncoderMem(true),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(true),
		zstd.WithZeroFrames(true),
	)
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(p, make([]byte, 0, len(p)/3+64)), nil
}

// Decompress returns the JSON held in p: p may be a zstd frame or plain
// JSON. Output beyond MaxDecoded is an error, not an allocation.
func Decompress(p []byte) ([]byte, error) {
	if !bytes.HasPrefix(p, zstdMagic) {
		return p, nil
	}
	dec, err := zstd.NewReader(bytes.NewReader(p),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(MaxDecoded),
		zstd.WithDecoderMaxWindow(8<<20),
	)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	out, err := io.ReadAll(io.LimitReader(dec, MaxDecoded+1))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	if len(out) > MaxDecoded {
		return nil, fmt.Errorf("decoded report larger than %d bytes", MaxDecoded)
	}
	return out, nil
}

// Decode parses a report from zstd-compressed or plain JSON and validates it.
// Unknown fields are allowed (newer writers); a report from a newer major
// version is refused.
func Decode(p []byte) (*Report, error) {
	js, err := Decompress(p)
	if err != nil {
		return nil, err
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 {
		return nil, errors.New("empty report")
	}
	var r Report
	if err := json.Unmarshal(js, &r); err != nil {
		return nil, fmt.Errorf("report JSON: %w", err)
	}
	if err := r.Validate(); err != nil {
		return &r, fmt.Errorf("invalid report: %w", err)
	}
	return &r, nil
}
