package loadtest

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// The simulated fleet's program: several ways to crash, built with gcc
// (non-PIE, so that file addresses are runtime addresses) and a GNU build
// ID, its debug information in a .build-id tree for the collector.
const fleetProgram = `
#include <signal.h>
#include <stdlib.h>
volatile int *p;
__attribute__((noinline)) void parse_header(void) { *p = 1; }
__attribute__((noinline)) void decode_frame(void) { *p = 2; }
__attribute__((noinline)) void flush_queue(void) { abort(); }
__attribute__((noinline)) void apply_config(void) { raise(SIGBUS); }
__attribute__((noinline)) void read_sensor(void) { *p = 3; }
__attribute__((noinline)) void write_log(void) { *p = 4; }
__attribute__((noinline)) void handle_request(int i) {
	switch (i) {
	case 0: parse_header(); break;
	case 1: decode_frame(); break;
	case 2: flush_queue(); break;
	case 3: apply_config(); break;
	case 4: read_sensor(); break;
	default: write_log();
	}
}
int main(int argc, char **argv) { handle_request(argc); return 0; }
`

var crashFuncs = []string{"parse_header", "decode_frame", "flush_queue", "apply_config", "read_sensor", "write_log"}

// fleet is what the simulated boards send: one program, its functions'
// addresses, and the .build-id tree a collector symbolizes it with.
type fleet struct {
	buildID  string
	funcs    map[string]uint64 // symbol address
	caller   uint64            // an address inside handle_request
	mainPC   uint64
	debugDir string
}

func buildFleet(t testing.TB) *fleet {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "prog.c")
	os.WriteFile(src, []byte(fleetProgram), 0o644)
	bin := filepath.Join(dir, "loadprog")
	testutil.Run(t, "gcc", "-g", "-O1", "-no-pie", "-Wl,--build-id", "-o", bin, src)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl := &fleet{funcs: map[string]uint64{}}
	syms, _ := f.Symbols()
	for _, s := range syms {
		switch s.Name {
		case "handle_request":
			fl.caller = s.Value + s.Size/2
		case "main":
			fl.mainPC = s.Value + s.Size/2
		default:
			fl.funcs[s.Name] = s.Value
		}
	}
	for _, n := range crashFuncs {
		if fl.funcs[n] == 0 {
			t.Fatalf("%s: no symbol %s", bin, n)
		}
	}
	note := f.Section(".note.gnu.build-id")
	if note == nil {
		t.Fatal("no build id")
	}
	b, _ := note.Data()
	fl.buildID = hex.EncodeToString(b[16:])
	fl.debugDir = filepath.Join(dir, "debug")
	idDir := filepath.Join(fl.debugDir, ".build-id", fl.buildID[:2])
	os.MkdirAll(idDir, 0o755)
	data, _ := os.ReadFile(bin)
	os.WriteFile(filepath.Join(idDir, fl.buildID[2:]+".debug"), data, 0o644)
	return fl
}

// upload is one report as a device sends it.
type upload struct {
	id, device string
	body       []byte
}

// reports makes n reports from devices boards: each board runs one of two
// releases and one hardware revision, and crashes in one of the
// program's ways (some ways more often than others).
func (fl *fleet) reports(n, devices int, seed int64) []upload {
	rng := rand.New(rand.NewSource(seed))
	signals := map[string]int{"flush_queue": 6, "apply_config": 7}
	out := make([]upload, n)
	for i := range out {
		d := rng.Intn(devices)
		fn := crashFuncs[min(rng.Intn(len(crashFuncs)+3), len(crashFuncs)-1)]
		sig := signals[fn]
		if sig == 0 {
			sig = 11
		}
		release := []string{"2.4.1", "2.4.2"}[d%2]
		r := &report.Report{
			Version: report.Version, ID: report.NewID(), Time: time.Now().Unix() - int64(rng.Intn(30*86400)), TimeTrusted: true,
			DeviceID: fmt.Sprintf("board-%05d", d), Kernel: "6.1.0", Arch: "x86_64",
			Release: &report.Release{ID: "poky", VersionID: "5.0", ImageID: "gateway", ImageVersion: release},
			Device:  &report.Device{Attributes: map[string]string{"hw_rev": []string{"A1", "B2", "B3"}[d%3]}},
			Signal:  report.Signal{Number: sig, Name: report.SignalName(sig)},
			PID:     1000 + i%30000, TID: 1000 + i%30000, Comm: "loadprog", Exe: "/usr/bin/loadprog",
			Modules: []report.Module{{Path: "/usr/bin/loadprog", BuildID: fl.buildID, BuildIDKind: "gnu",
				Start: 0x400000, End: 0x500000, RuntimeOffset: 0x400000, CompiledOffset: 0x400000}},
			Threads: []report.Thread{{TID: 1000 + i%30000, Name: "loadprog", Crashed: true, StopReason: "end_of_stack",
				Frames: []report.Frame{
					{PC: report.Hex(fl.funcs[fn] + 4), Method: "context", Trust: "high", Module: 0, Exact: true},
					{PC: report.Hex(fl.caller), Method: "cfi", Trust: "high", Module: 0},
					{PC: report.Hex(fl.mainPC), Method: "cfi", Trust: "high", Module: 0},
				}}},
			Handler: report.Handler{Version: "load", Mode: "live"},
		}
		b, err := report.Encode(r)
		if err != nil {
			panic(err)
		}
		out[i] = upload{id: r.ID, device: r.DeviceID, body: b}
	}
	return out
}

// result is what a load run acknowledged.
type result struct {
	acked                 map[string]int // id: 2xx answers
	retries, refused, dup atomic.Int64   // dup: 200, the report was there already
	elapsed               time.Duration
}

// send posts every upload with workers clients, each retrying its
// report until a 2xx (a network error, 503, 507: as the uploader does),
// and returns what was acknowledged. stop, when closed, ends it early.
func send(t testing.TB, url func() string, ups []upload, workers int, stop <-chan struct{}) *result {
	res := &result{acked: map[string]int{}}
	var mu sync.Mutex
	next := atomic.Int64{}
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 30 * time.Second}
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ups) {
					return
				}
				u := ups[i]
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest("POST", url()+"/v1/reports", bytes.NewReader(u.body))
					req.Header.Set("Authorization", "Bearer "+token)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Content-Encoding", "zstd")
					req.Header.Set("X-Unwound-Report-Id", u.id)
					req.Header.Set("X-Unwound-Device-Id", u.device)
					resp, err := client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							if resp.StatusCode == 200 {
								res.dup.Add(1)
							}
							mu.Lock()
							res.acked[u.id]++
							mu.Unlock()
							break
						}
						if resp.StatusCode/100 == 4 {
							t.Errorf("report %s: HTTP %d", u.id, resp.StatusCode)
							res.refused.Add(1)
							break
						}
					}
					res.retries.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func benchLoad() bool { return os.Getenv("UNWOUND_BENCH_LOAD") != "" }
