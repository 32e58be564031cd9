package main

import (
	"bufio"
	"bytes"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/testbin"
	"github.com/unwound-dev/unwound/testkit/testutil"
	"github.com/unwound-dev/unwound/wire/armor"
)

// TestDumpExtractConfirm: `unwound-uploader dump --remove` on the board,
// its output through a console polluted with shell prompts, kernel
// messages, CRLF and a logger's timestamps, one line lost; `unwound
// extract` on the host recovers the intact reports byte-identical and
// prints their confirmations; fed back to the board, those (and not a
// forged one) remove exactly the confirmed entries.
func TestDumpExtractConfirm(t *testing.T) {
	dir := t.TempDir()
	uploaderBin, unwoundBin := testbin.Build(t, "unwound-uploader", ""), testbin.Build(t, "unwound", "")
	q := testutil.Queue(t)
	want := testutil.Fill(t, q, rand.New(rand.NewSource(2)), 4, 200)
	names := testutil.Entries(t, q.Dir())
	cfg := testutil.Config(t, q.Dir(), "")

	dump := exec.Command(uploaderBin, "--config", cfg, "dump", "--remove", "--wait", "60s")
	stdin, _ := dump.StdinPipe()
	stdout, _ := dump.StdoutPipe()
	var dumpLog bytes.Buffer
	dump.Stderr = &dumpLog
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dump.Process.Kill(); dump.Wait() })
	// The console: what the board printed, as a terminal logger saw it.
	var console strings.Builder
	console.WriteString("[12:00:00] root@board:~# unwound-uploader dump --remove\r\n")
	sc := bufio.NewScanner(stdout)
	ends, n := 0, 0
	var lost string
	for ends < 4 && sc.Scan() {
		l := sc.Text()
		n++
		if strings.HasPrefix(l, "=UNWOUND-END") {
			ends++
		}
		if ends == 3 && lost == "" && strings.HasPrefix(l, "=UW 0002 ") {
			lost = l // the fourth report's second line never makes it
			continue
		}
		if n%7 == 0 {
			console.WriteString("[  " + strconv.Itoa(100+n) + ".000123] eth0: link up, 100Mbps, full-duplex\r\n")
		}
		console.WriteString("[12:00:" + strconv.Itoa(10+n%50) + "] " + l + "\r\n")
	}
	console.WriteString("[12:00:59] root@board:~# \r\n")
	if ends != 4 || lost == "" {
		t.Fatalf("read %d blocks from dump", ends)
	}
	logFile := filepath.Join(dir, "console.log")
	os.WriteFile(logFile, []byte(console.String()), 0o644)

	rx := t.TempDir()
	ext := exec.Command(unwoundBin, "extract", "--out", rx)
	ext.Stdin = strings.NewReader(console.String())
	var extErr bytes.Buffer
	ext.Stderr = &extErr
	acks, err := ext.Output()
	if err == nil || !strings.Contains(extErr.String(), "1 of 4 reports damaged") {
		t.Fatalf("extract: %v\n%s", err, &extErr)
	}
	got := map[string][]byte{}
	for id, b := range want {
		if string(b) != string(must(q.Read(names[3]))) {
			got[id] = b
		}
	}
	testutil.Received(t, rx, got)
	if c := strings.Count(string(acks), "=UNWOUND-ACK "); c != 3 {
		t.Fatalf("%d confirmations:\n%s", c, acks)
	}
	// Back to the board, through the console; plus a forged confirmation
	// of the damaged report (its name, other bytes).
	forged := armor.Ack(names[3], []byte("not the report"))
	io.WriteString(stdin, strings.ReplaceAll(string(acks), "=UNWOUND", "> =UNWOUND")+forged+"\n")
	stdin.Close()
	if err := dump.Wait(); err != nil {
		t.Fatalf("dump: %v\n%s", err, &dumpLog)
	}
	left := testutil.Entries(t, q.Dir())
	if len(left) != 1 || left[0] != names[3] {
		t.Fatalf("left in the queue: %v, want only %s\n%s", left, names[3], &dumpLog)
	}
	if !strings.Contains(dumpLog.String(), "3 removed, 1 kept") || !strings.Contains(dumpLog.String(), "confirmed other bytes") {
		t.Fatalf("dump log:\n%s", &dumpLog)
	}
	// The same log via a file argument: the intact ones are already there.
	if out, err := exec.Command(unwoundBin, "extract", "--out", rx, logFile).CombinedOutput(); err == nil || !strings.Contains(string(out), "already there") {
		t.Fatalf("extract FILE: %v\n%s", err, out)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }
