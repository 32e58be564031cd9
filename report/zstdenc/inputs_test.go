package zstdenc_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"testing"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/report/jsonlite"
)

// realReport reads a report testdata/mkreports.sh made and returns the
// bytes the handler queues for it (compact JSON, as jsonlite writes).
func realReport(t testing.TB, name string) []byte {
	z, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decode.Report(z)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out, err := jsonlite.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// syntheticReport is a report of threads threads with frames frames
// each: PCs drawn from a few call chains per module, as in a daemon
// whose threads wait in the same few places, plus some scattered ones.
func syntheticReport(seed int64, threads, frames int) []byte {
	rng := rand.New(rand.NewSource(seed))
	r := &report.Report{
		Version: report.Version, ID: fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()),
		Time: 1790000000, TimeTrusted: true, Arch: "arm", PID: 812, TID: 815,
		Kernel: "6.6.32-yocto-standard", Comm: "sensord", Exe: "/usr/bin/sensord",
		Signal:  report.Signal{Number: 11, Name: "SIGSEGV", Code: 1, CodeName: "SEGV_MAPERR"},
		Handler: report.Handler{Version: "0.4.0", Mode: "live", DurationMS: 41, FrozenMS: 12, MaxRSSKiB: 3100},
	}
	libs := []string{"/usr/bin/sensord", "/lib/libc.so.6", "/lib/libpthread.so.0", "/usr/lib/libstdc++.so.6",
		"/lib/libm.so.6", "/usr/lib/libssl.so.3", "/usr/lib/libcrypto.so.3", "/usr/lib/libz.so.1", "/lib/ld-linux-armhf.so.3", "[vdso]"}
	base := uint64(0xb6e00000)
	for i, p := range libs {
		size := uint64(0x10000 + rng.Intn(0x200000))
		start := base
		if i == 0 {
			start = 0x400000
		}
		r.Modules = append(r.Modules, report.Module{Path: p, BuildID: fmt.Sprintf("%016x%016x%08x", rng.Uint64(), rng.Uint64(), rng.Uint32()),
			BuildIDKind: "gnu", Start: report.Hex(start), End: report.Hex(start + size), RuntimeOffset: report.Hex(start)})
		base += (size + 0xfffff) &^ 0xfff
	}
	chains := make([][]report.Frame, 8)
	methods := []string{"cfi", "ehabi", "fp", "lr"}
	for c := range chains {
		for f := 0; f < frames; f++ {
			m := rng.Intn(len(r.Modules))
			mod := r.Modules[m]
			pc := uint64(mod.Start) + uint64(rng.Intn(int(mod.End-mod.Start)))&^1
			chains[c] = append(chains[c], report.Frame{PC: report.Hex(pc), Method: methods[rng.Intn(len(methods))], Module: m, Thumb: rng.Intn(2) == 0})
		}
	}
	for t := 0; t < threads; t++ {
		th := report.Thread{TID: 815 + t, Name: fmt.Sprintf("worker-%d", t), StopReason: "end_of_stack", Crashed: t == 0}
		chain := chains[rng.Intn(len(chains))]
		for f := 0; f < frames; f++ {
			fr := chain[f]
			if f < 2 || rng.Intn(8) == 0 { // the innermost frames differ
				fr.PC += report.Hex(rng.Intn(0x400)) &^ 1
			}
			if f == 0 {
				fr.Method, fr.Exact = "context", true
			}
			th.Frames = append(th.Frames, fr)
		}
		r.Threads = append(r.Threads, th)
	}
	b, err := jsonlite.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

type input struct {
	name string
	data []byte
}

// reports are what the handler compresses.
func reports(t testing.TB) []input {
	return []input{
		{"real crash, 4 threads", realReport(t, "crash-threads.json.zst")},
		{"real daemon, 64 threads", realReport(t, "threads64.json.zst")},
		{"synthetic, 1 thread × 16", syntheticReport(1, 1, 16)},
		{"synthetic, 8 threads × 32", syntheticReport(2, 8, 32)},
		{"synthetic, 64 threads × 64", syntheticReport(3, 64, 64)},
		{"synthetic, 64 threads × 256", syntheticReport(4, 64, 256)},
	}
}

// others are every kind of input besides reports.
func others() []input {
	rng := rand.New(rand.NewSource(7))
	random := func(n int) []byte {
		b := make([]byte, n)
		rng.Read(b)
		return b
	}
	text := func(n, alphabet int, first byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = first + byte(rng.Intn(alphabet))
		}
		return b
	}
	withMax := func(n int, top byte) []byte {
		b := text(n, 26, 'a')
		b[n/2] = top
		return b
	}
	return []input{
		{"empty", nil},
		{"1 byte", []byte{'{'}},
		{"2 same bytes", []byte{0, 0}},
		{"all same, 100", bytes.Repeat([]byte{'x'}, 100)},
		{"all same, 300 KiB", bytes.Repeat([]byte{0}, 300<<10)},
		{"random, 17", random(17)},
		{"random, 1 KiB", random(1 << 10)},
		{"random, 200 KiB", random(200 << 10)},
		{"letters, 1000", text(1000, 26, 'a')},
		{"letters, 100 KiB", text(100<<10, 26, 'a')},
		{"two symbols, 50 KiB", text(50<<10, 2, 'a')},
		{"top literal 127", withMax(5000, 127)},
		{"top literal 128", withMax(5000, 128)},
		{"top literal 129", withMax(5000, 129)},
		{"skewed literals", append(bytes.Repeat([]byte{'a'}, 40000), text(3000, 90, ' ')...)},
		{"short repeats", bytes.Repeat([]byte("abcdefgh"), 1000)},
		{"periodic, 300 KiB", bytes.Repeat(random(3000), 100)},
		{"over the window, 2.5 MiB", bytes.Repeat(syntheticReport(5, 64, 64), 12)[:5<<19]},
	}
}
