// Package read reads what the handler writes: zstd-compressed report JSON
// and queue entries. It lives apart from package report so that the
// handler, which only writes (with its own encoder, report/zstdenc),
// links no zstd decoder; readers (the uploader, the host CLI) decode with
// klauspost/compress.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/zstdenc"
)

// MaxDecoded bounds a decoded report or entry: a real one is a few KiB;
// this is generous for 64 threads × 256 frames and protects readers from
// bombs.
const MaxDecoded = 16 << 20

// JSON returns the JSON held in p: p may be a zstd frame or plain JSON.
// Output beyond MaxDecoded is an error, not an allocation.
func JSON(p []byte) ([]byte, error) {
	if !bytes.HasPrefix(p, []byte(zstdenc.Magic)) {
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

// Report parses a report from zstd-compressed or plain JSON and validates
// it. Unknown fields are allowed (newer writers); a report from a newer
// major version is refused.
func Report(p []byte) (*report.Report, error) {
	js, err := JSON(p)
	if err != nil {
		return nil, err
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 {
		return nil, errors.New("empty report")
	}
	var r report.Report
	if err := json.Unmarshal(js, &r); err != nil {
		return nil, fmt.Errorf("report JSON: %w", err)
	}
	if err := r.Validate(); err != nil {
		return &r, fmt.Errorf("invalid report: %w", err)
	}
	return &r, nil
}

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

// Entry checks a queue entry's bytes (queue.Options.Check): one zstd frame
// that carries a content checksum (RFC 8878 §3.1.1.1.1,
// Content_Checksum_flag), decodes with that checksum matching, and holds
// JSON. This is what a torn write, a block of zeros after a power cut or a
// bit flip on flash fails.
func Entry(data []byte) error {
	if !bytes.HasPrefix(data, []byte(zstdenc.Magic)) {
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
