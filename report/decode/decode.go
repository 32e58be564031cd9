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
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/zstdenc"
)

// MaxDecoded bounds a decoded report or entry: a real one is a few KiB;
// this is generous for 64 threads × 256 frames and protects readers from
// bombs.
const MaxDecoded = 16 << 20

// SmallDecoded is what a report decodes to at most on the fast path:
// a real one is a few KiB. Frames that declare more, or declare nothing,
// take one of BigDecodes slots: a process (a collector taking uploads
// from a fleet) never holds more than BigDecodes outputs of up to
// MaxDecoded at once, however many requests decode in parallel.
const (
	SmallDecoded = 1 << 20
	BigDecodes   = 2
	maxWindow    = 8 << 20
)

var (
	bigSlots = make(chan struct{}, BigDecodes)
	bigCount atomic.Int64

	smallOnce, bigOnce sync.Once
	smallDec, bigDec   *zstd.Decoder
	smallErr, bigErr   error
)

// BigDecoded counts the decodes that took a big slot: a server that sees
// it move knows a large allocation has come and gone, and may give the
// memory back to the system.
func BigDecoded() int64 { return bigCount.Load() }

func newDecoder(max uint64) (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0), // GOMAXPROCS decodes at once; DecodeAll waits for one
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(max),
		zstd.WithDecoderMaxWindow(maxWindow),
	)
}

// JSON returns the JSON held in p: p may be a zstd frame or plain JSON.
// A frame that declares more than MaxDecoded is refused from its header,
// without decoding; one that decodes to more stops being decoded there.
func JSON(p []byte) ([]byte, error) {
	if !bytes.HasPrefix(p, []byte(zstdenc.Magic)) {
		return p, nil
	}
	var h zstd.Header
	if err := h.Decode(p); err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	if h.HasFCS && h.FrameContentSize > MaxDecoded {
		return nil, fmt.Errorf("zstd frame declares %d bytes, more than the %d a report may have", h.FrameContentSize, MaxDecoded)
	}
	if h.WindowSize > maxWindow {
		return nil, fmt.Errorf("zstd frame window of %d bytes, more than %d", h.WindowSize, maxWindow)
	}
	if h.HasFCS && h.FrameContentSize <= SmallDecoded {
		smallOnce.Do(func() { smallDec, smallErr = newDecoder(SmallDecoded) })
		if smallErr != nil {
			return nil, smallErr
		}
		out, err := smallDec.DecodeAll(p, nil)
		if !errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			if err != nil {
				return nil, fmt.Errorf("zstd: %w", err)
			}
			return out, nil
		}
		// More frames, or one that lied about its size: the slow path.
	}
	bigSlots <- struct{}{}
	defer func() { <-bigSlots }()
	bigCount.Add(1)
	bigOnce.Do(func() { bigDec, bigErr = newDecoder(MaxDecoded) })
	if bigErr != nil {
		return nil, bigErr
	}
	// One buffer of the largest size, not a buffer doubled up to it (the
	// doubling's garbage outweighed what it held), with room for the
	// block that crosses the limit: the decoder checks after each block
	// (RFC 8878 §3.1.1.2.4: at most 128 KiB), and a block that did not
	// fit would copy the whole buffer into a larger one first.
	out, err := bigDec.DecodeAll(p, make([]byte, 0, MaxDecoded+256<<10))
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return nil, fmt.Errorf("decoded report larger than %d bytes", MaxDecoded)
	}
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
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
	if !utf8.Valid(js) {
		// The handler writes invalid UTF-8 as U+FFFD: this did not come
		// from one, and encoding/json would quietly replace it.
		return nil, errors.New("report JSON: not UTF-8")
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
