package zstdenc_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/unwound-dev/unwound/report/zstdenc"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

func decoder(t testing.TB) *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// check decodes z with klauspost/compress (which verifies the content
// checksum) and compares it with want; it also checks the frame header.
func check(t testing.TB, d *zstd.Decoder, z, want []byte) {
	t.Helper()
	got, err := d.DecodeAll(z, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("decoded %d bytes, not the %d compressed", len(got), len(want))
	}
	var h zstd.Header
	if err := h.Decode(z); err != nil {
		t.Fatal(err)
	}
	if !h.HasCheckSum || !h.HasFCS || h.FrameContentSize != uint64(len(want)) {
		t.Errorf("header %+v: want a checksum and content size %d", h, len(want))
	}
	if h.SingleSegment != (len(want) <= 1<<20) {
		t.Errorf("single segment %v for %d bytes", h.SingleSegment, len(want))
	}
	if len(want) > 1<<20 && h.WindowSize != 1<<20 {
		t.Errorf("window %d", h.WindowSize)
	}
}

// TestRoundTrip: every input comes back from klauspost/compress's
// decoder and from the reference zstd CLI (zstd -t, zstd -dc), both
// checking the content checksum.
func TestRoundTrip(t *testing.T) {
	d := decoder(t)
	cli, _ := exec.LookPath("zstd")
	dir := t.TempDir()
	for _, in := range append(reports(t), others()...) {
		t.Run(in.name, func(t *testing.T) {
			z := zstdenc.Compress(nil, in.data)
			check(t, d, z, in.data)
			if cli == "" {
				return
			}
			f := filepath.Join(dir, "x.zst")
			if err := os.WriteFile(f, z, 0o600); err != nil {
				t.Fatal(err)
			}
			testutil.Run(t, cli, "-q", "-t", f)
			out, err := exec.Command(cli, "-q", "-dc", f).Output()
			if err != nil || !bytes.Equal(out, in.data) {
				t.Fatalf("zstd -dc: %v, %d bytes of %d", err, len(out), len(in.data))
			}
		})
	}
	if cli == "" {
		t.Skip("zstd CLI not installed: decoded with klauspost/compress only")
	}
}

// A frame's checksum is real: damage it and decoders refuse the frame.
func TestChecksumIsChecked(t *testing.T) {
	in := realReport(t, "crash-threads.json.zst")
	z := zstdenc.Compress(nil, in)
	z[len(z)-1] ^= 0x40
	if _, err := decoder(t).DecodeAll(z, nil); err == nil {
		t.Error("a frame with a wrong checksum decoded")
	}
}

func TestAppendsAndIsDeterministic(t *testing.T) {
	in := syntheticReport(9, 8, 32)
	a := zstdenc.Compress([]byte("prefix"), in)
	b := zstdenc.Compress(nil, in)
	if !bytes.HasPrefix(a, []byte("prefix")) || !bytes.Equal(a[6:], b) {
		t.Fatal("Compress does not append, or two runs differ")
	}
}

// klauspostFastest is the encoder the handler used before zstdenc, with
// its settings: the yardstick for size and speed.
func klauspostFastest(t testing.TB) *zstd.Encoder {
	e, err := zstd.NewWriter(nil,
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(32<<10),
		zstd.WithLowerEncoderMem(true),
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(true),
		zstd.WithZeroFrames(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Reports compress to within 15% of klauspost/compress's fastest level.
func TestReportSizesNearKlauspost(t *testing.T) {
	e := klauspostFastest(t)
	for _, in := range reports(t) {
		ours, theirs := len(zstdenc.Compress(nil, in.data)), len(e.EncodeAll(in.data, nil))
		ratio := float64(ours) / float64(theirs)
		t.Logf("%-28s %7d B → %6d B, klauspost %6d B: %.3f", in.name, len(in.data), ours, theirs, ratio)
		if ratio > 1.15 {
			t.Errorf("%s: %d bytes, %.0f%% more than klauspost's %d", in.name, ours, 100*(ratio-1), theirs)
		}
	}
}

// FuzzCompress: any input comes back from klauspost/compress's decoder,
// content checksum verified.
func FuzzCompress(f *testing.F) {
	for _, s := range []string{"", "a", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", `{"pc":"0x400123","method":"cfi","module":0},{"pc":"0x400456","method":"cfi","module":0}`} {
		f.Add([]byte(s))
	}
	f.Add(syntheticReport(1, 1, 16))
	f.Add(bytes.Repeat([]byte{0x80, 0, 0xff, 1}, 100))
	d := decoder(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		check(t, d, zstdenc.Compress(nil, in), in)
	})
}

// BenchmarkCompress reports, besides our speed, our size and speed as
// ratios to klauspost/compress's fastest level measured in the same run
// (size/klauspost below 1 is smaller, speed/klauspost above 1 faster).
func BenchmarkCompress(b *testing.B) {
	e := klauspostFastest(b)
	for _, in := range reports(b) {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			b.ReportAllocs()
			var z []byte
			for i := 0; i < b.N; i++ {
				z = zstdenc.Compress(z[:0], in.data)
			}
			ours := b.Elapsed()
			b.StopTimer()
			var k []byte
			start := time.Now()
			for i := 0; i < b.N; i++ {
				k = e.EncodeAll(in.data, k[:0])
			}
			theirs := time.Since(start)
			b.ReportMetric(float64(len(z)), "bytes")
			b.ReportMetric(float64(len(z))/float64(len(k)), "size/klauspost")
			b.ReportMetric(theirs.Seconds()/ours.Seconds(), "speed/klauspost")
		})
	}
}
