package decode_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

func sample() *report.Report {
	fa := report.Hex(0)
	return &report.Report{
		Version: report.Version, ID: report.NewID(), Time: 1790000000, TimeTrusted: true,
		Arch: "aarch64", PID: 42, TID: 43, Comm: "crash", Exe: "/usr/bin/crash",
		Signal: report.Signal{Number: 11, Name: "SIGSEGV", Code: 1, CodeName: "SEGV_MAPERR", FaultAddr: &fa},
		Modules: []report.Module{{Path: "/usr/bin/crash", BuildID: "ab12", BuildIDKind: "gnu",
			Start: 0x400000, End: 0x401000, RuntimeOffset: 0x400000}},
		Threads: []report.Thread{{TID: 43, Crashed: true, StopReason: "end_of_stack",
			Frames: []report.Frame{{PC: 0x400123, Method: "context", Exact: true}, {PC: 0x400456, Method: "cfi", Module: 0}}}},
		Handler: report.Handler{Version: "test", Mode: "live"},
	}
}

// What the handler encodes (its own zstd encoder) the readers decode
// (klauspost/compress) to the same report; plain JSON is read too.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := sample()
	z, err := report.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode.Report(z)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, r)
	}
	if err := decode.Entry(z); err != nil {
		t.Errorf("Entry: %v", err)
	}
	js, _ := json.Marshal(r)
	if _, err := decode.Report(js); err != nil {
		t.Errorf("plain JSON: %v", err)
	}
}

// The zstd CLI must read our frames: that is the promise to users.
func TestZstdCLIReadsReports(t *testing.T) {
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Skip("zstd not installed")
	}
	z, _ := report.Encode(sample())
	cmd := exec.Command("zstd", "-dc", "--check")
	cmd.Stdin = bytes.NewReader(z)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode.Report(out); err != nil {
		t.Fatal(err)
	}
	z[len(z)-6] ^= 0xff // corrupt: the checksum must catch it
	if _, err := decode.Report(z); err == nil {
		t.Error("corrupted frame decoded")
	}
	if err := decode.Entry(z); err == nil {
		t.Error("corrupted entry accepted")
	}
}

func TestDecodeRefusesBadReports(t *testing.T) {
	r := sample()
	r.Threads[0].Frames[1].Module = 7
	js, _ := json.Marshal(r)
	if _, err := decode.Report(js); err == nil || !strings.Contains(err.Error(), "module index") {
		t.Errorf("bad module index: %v", err)
	}
	r = sample()
	r.Version = report.Version + 1
	js, _ = json.Marshal(r)
	if _, err := decode.Report(js); err == nil {
		t.Error("future version accepted")
	}
	bomb := report.Compress(make([]byte, decode.MaxDecoded+100))
	if _, err := decode.Report(bomb); err == nil || !strings.Contains(err.Error(), "declares 16777316 bytes") {
		t.Errorf("bomb that declares its size: %v", err)
	}
	for name, b := range map[string][]byte{
		"bomb that declares no size": Bomb(t, decode.MaxDecoded+100),
		"small frame, then a bomb":   append(report.Compress([]byte("{}")), Bomb(t, 2*decode.SmallDecoded)...),
	} {
		before := decode.BigDecoded()
		if _, err := decode.Report(b); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
		if decode.BigDecoded() != before+1 {
			t.Errorf("%s: decoded without a big slot", name)
		}
	}
	if _, err := decode.Report(Bomb(t, decode.MaxDecoded+100)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("bomb: %v", err)
	}
	js, _ = json.Marshal(sample())
	js = bytes.Replace(js, []byte(`"crash"`), []byte("\"cr\xffash\""), 1)
	if _, err := decode.Report(js); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Errorf("invalid UTF-8: %v", err)
	}
	deep := []byte(`{"version":1,"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "}")
	if _, err := decode.Report(report.Compress(deep)); err == nil || !strings.Contains(err.Error(), "depth") {
		t.Errorf("deep nesting: %v", err)
	}
}

// Bomb is a zstd frame of n zero bytes that does not declare its size
// (a streaming encoder's frame): only decoding tells how large it is.
func Bomb(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(make([]byte, n))
	w.Close()
	return buf.Bytes()
}

func FuzzDecode(f *testing.F) {
	z, _ := report.Encode(sample())
	js, _ := json.Marshal(sample())
	f.Add(z)
	f.Add(js)
	f.Add([]byte(`{"version":1,"id":"00000000000000000000000000000000","threads":[{"frames":[{"pc":"0x1","module":-1}]}]}`))
	f.Add(z[:len(z)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode.Report(b)
		if err == nil {
			if _, err := report.Encode(r); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzEntry: whatever flash gives back, Entry returns (no panic, no
// runaway allocation), and what it accepts is a checksummed frame.
func FuzzEntry(f *testing.F) {
	good := report.Compress([]byte(`{"version":1,"id":"00112233445566778899aabbccddeeff"}`))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(append([]byte(nil), good...), good...))
	f.Add(append(append([]byte(nil), good...), 0))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x04})
	f.Add(make([]byte, 64))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if decode.Entry(data) == nil && (len(data) < 5 || data[4]&0x04 == 0) {
			t.Fatalf("accepted a frame without a checksum: %x", data)
		}
	})
}
