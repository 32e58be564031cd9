package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/qemu/guest"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// The queue's tests on real filesystems under a real kernel (aarch64, the
// fastest guest): power cuts, a crash storm, a full filesystem. The guest
// side is qemu/cmd/queuelab; everything it finds is a "QL-…" console line.

const queueArch = "aarch64"

// queueLab is what every queue guest needs: the kernel and the binaries.
type queueLab struct {
	t                                      testing.TB
	kernel, init, queuelab, handler, crash string
}

func newQueueLab(t testing.TB, work string) *queueLab {
	t.Helper()
	if testing.Short() {
		t.Skip("boots QEMU guests")
	}
	kernel, err := Kernel(queueArch)
	if err != nil {
		t.Fatal(err)
	}
	l := &queueLab{t: t, kernel: kernel}
	l.init = goBuild(t, "github.com/unwound-dev/unwound/qemu/cmd/guestinit", queueArch, filepath.Join(work, "init"))
	l.queuelab = goBuild(t, "github.com/unwound-dev/unwound/qemu/cmd/queuelab", queueArch, filepath.Join(work, "queuelab"))
	l.handler = goBuild(t, "github.com/unwound-dev/unwound/cmd/unwound-handler", queueArch, filepath.Join(work, "unwound-handler"))
	// A service that crashes at once: static, so the guest needs no libc.
	src := filepath.Join(work, "svc.c")
	os.WriteFile(src, []byte("int main(void) { *(volatile int *)0 = 1; return 0; }\n"), 0o644)
	l.crash = filepath.Join(work, "svc")
	crossCompile(t, queueArch, "-static", "-O2", "-o", l.crash, src)
	return l
}

func (l *queueLab) initramfs(plan guest.Plan, config string) *Initramfs {
	r := NewInitramfs()
	r.HostFile("/init", 0o755, l.init)
	r.HostFile("/bin/queuelab", 0o755, l.queuelab)
	r.HostFile("/bin/unwound-handler", 0o755, l.handler)
	for i := 0; i < 4; i++ {
		r.HostFile(fmt.Sprintf("/bin/svc%d", i), 0o755, l.crash)
	}
	if config != "" {
		r.File("/etc/unwound/unwound.toml", 0o644, []byte(config))
	}
	js, _ := json.Marshal(plan)
	r.File("/plan.json", 0o644, js)
	return r
}

// image makes a filesystem image on the host, without root or mounts.
func image(t testing.TB, dir, fs string, mib int) string {
	t.Helper()
	p := filepath.Join(dir, fs+".img")
	switch fs {
	case "ubifs", "jffs2":
		// Erased NOR flash: JFFS2 mounts it as it is, UBI formats it
		// when it first attaches.
		if err := os.WriteFile(p, bytes.Repeat([]byte{0xff}, 64<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(int64(mib) << 20)
	f.Close()
	var cmd *exec.Cmd
	switch fs {
	case "ext4":
		// -m 0: the handler runs as root, which may use reserved blocks
		// anyway; the test fills the whole filesystem.
		cmd = exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0", p)
	case "vfat":
		cmd = exec.Command("mkfs.vfat", p)
	}
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/sbin:"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s (make deps installs e2fsprogs and dosfstools)", cmd.Args, err, out)
	}
	return p
}

// partitionedDTB dumps the device tree QEMU makes for m, adds a partition
// "queue" covering the whole flash bank (fixed-partitions, read by the
// kernel's ofpart), and compiles it again (dtc, from device-tree-compiler).
// UBI refuses to attach a raw CFI chip (it has an erase-region table,
// drivers/mtd/ubi/build.c io_init); on a partition it attaches.
func (l *queueLab) partitionedDTB(m *Machine, work string) string {
	out := filepath.Join(work, "virt-queue.dtb")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	raw := filepath.Join(work, "virt.dtb")
	empty := filepath.Join(work, "empty")
	os.WriteFile(empty, nil, 0o644)
	args, err := m.args(empty, filepath.Join(work, "dump-console"), filepath.Join(work, "dump-ship"))
	if err != nil {
		l.t.Fatal(err)
	}
	args[2] += ",dumpdtb=" + raw
	testutil.Run(l.t, args[0], args[1:]...)
	dts, err := exec.Command("dtc", "-q", "-I", "dtb", "-O", "dts", raw).Output()
	if err != nil {
		l.t.Fatalf("dtc (make deps installs device-tree-compiler): %v", err)
	}
	const node = "flash@4000000 {"
	i := bytes.Index(dts, []byte(node))
	if i < 0 {
		l.t.Fatalf("no %s in the device tree", node)
	}
	// Subnodes go after the properties: before the node's closing brace.
	j := bytes.Index(dts[i:], []byte("\n\t};"))
	if j < 0 {
		l.t.Fatalf("%s: no end", node)
	}
	i += j + 1
	parts := `
		partitions {
			compatible = "fixed-partitions";
			#address-cells = <1>;
			#size-cells = <1>;
			partition@0 {
				label = "queue";
				reg = <0x0 0x4000000>;
			};
		};
`
	dts = append(dts[:i:i], append([]byte(parts), dts[i:]...)...)
	cmd := exec.Command("dtc", "-q", "-I", "dts", "-O", "dtb", "-o", out, "-")
	cmd.Stdin = bytes.NewReader(dts)
	if b, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("dtc: %v\n%s", err, b)
	}
	return out
}

func (l *queueLab) machine(fs, img, work string, r *Initramfs) *Machine {
	m := &Machine{Arch: queueArch, Kernel: l.kernel, Initramfs: r, Memory: "128M", Dir: work, Timeout: 3 * time.Minute}
	switch fs {
	case "ubifs":
		m.Flash = img
		m.Append = "ubi.mtd=queue"
		m.DTB = l.partitionedDTB(m, work)
	case "jffs2":
		m.Flash = img
	default:
		m.Disks = []string{img}
	}
	return m
}

// qlLines returns the console's "QL-" lines, without the prefix.
func qlLines(console string) []string {
	// A power cut can come in the middle of a line: only whole lines
	// count.
	return guest.Facts(console[:strings.LastIndexByte(console, '\n')+1], "QL-")
}

// powerCuts is the number of cuts per filesystem: a few in make test,
// UNWOUND_POWERCUT_CUTS for a long run.
func powerCuts() int {
	if n, err := strconv.Atoi(os.Getenv("UNWOUND_POWERCUT_CUTS")); err == nil && n > 0 {
		return n
	}
	return 8
}

// TestPowerCut kills QEMU (SIGKILL: the guest loses power, the disk image
// keeps what the guest's writes completed, cache=directsync) at random
// moments while three writers store reports, boots the same image again,
// and checks: every entry is valid (the reader validates; nothing is ever
// quarantined), every entry whose store was confirmed on the console is
// still there unless the queue evicted it (oldest first, to stay within
// its bound), and the bound holds.
func TestPowerCut(t *testing.T) {
	for _, fs := range []string{"ext4", "vfat", "jffs2", "ubifs"} {
		fs := fs
		t.Run(fs, func(t *testing.T) { powerCut(t, fs, powerCuts()) })
	}
}

type pcEntry struct{ name, sum string }

func powerCut(t *testing.T, fs string, cuts int) {
	work := t.TempDir()
	l := newQueueLab(t, work)
	img := image(t, work, fs, 64)
	r := l.initramfs(guest.Plan{Steps: []guest.Step{{Run: []string{"/bin/queuelab", "powercut", fs}, MustSucceed: true}}}, "")
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	// known: entries that must be there (confirmed stored, or listed by a
	// previous boot), by sequence number.
	known := map[uint64]pcEntry{}
	stored, evicted, maxListed := 0, 0, 0
	start := time.Now()
	repaired, quarantined := 0, 0
	// inFlight: reports whose store had begun (PUTTING) and was not
	// confirmed when the power went, by checksum; recovered counts those
	// found whole after the next boot (the store had got far enough, or
	// Recover promoted its leftover temp).
	var inFlight map[string]bool
	inFlightTotal, recovered, promoted := 0, 0, 0
	for cut := 0; cut <= cuts; cut++ {
		if fs == "vfat" && cut > 0 {
			// FAT has no journal: a cut can leave its allocation table and
			// a directory disagreeing (freed clusters still referenced),
			// whatever the writer does, and Linux then remounts read-only.
			// Boards check it at boot (systemd-fsck, fsck.vfat -a), and so
			// does this test, before every boot.
			out, err := exec.Command("fsck.vfat", "-a", "-w", img).CombinedOutput()
			if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
				// Every cut leaves the dirty bit; count the real repairs.
				var fixes []string
				for _, ln := range strings.Split(string(out), "\n") {
					if ln = strings.TrimSpace(ln); ln != "" && !strings.HasPrefix(ln, "fsck.fat") && !strings.Contains(ln, "irty bit") &&
						!strings.Contains(ln, " files, ") {
						fixes = append(fixes, ln)
					}
				}
				if len(fixes) > 0 {
					repaired++
					t.Logf("cut %d: fsck.vfat: %s", cut, strings.Join(fixes, " "))
				}
			} else if err != nil {
				t.Fatalf("fsck.vfat: %v\n%s", err, out)
			}
		}
		m := l.machine(fs, img, work, r)
		console := filepath.Join(work, "console.log")
		os.Remove(console) // the previous boot's, before polling for the new one
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *Result, 1)
		go func() {
			res, _ := m.Run(ctx)
			done <- res
		}()
		// The last boot only checks what the last cut left.
		delay := time.Duration(rng.Int63n(int64(1500 * time.Millisecond)))
		wait := "QL-WRITING"
		if cut == cuts {
			delay, wait = 0, "QL-LISTED"
		}
		deadline := time.Now().Add(150 * time.Second)
		for {
			b, _ := os.ReadFile(console)
			// The last boot's listing is read whole: a kill between the
			// line and its newline would leave it uncounted (qlLines).
			if i := bytes.Index(b, []byte(wait)); i >= 0 && (cut < cuts || bytes.IndexByte(b[i:], '\n') >= 0) {
				break
			}
			if bytes.Contains(b, []byte("QL-FAIL")) || time.Now().After(deadline) {
				cancel()
				res := <-done
				t.Fatalf("cut %d: the guest did not get to %s; console:\n%s", cut, wait, tail(res.Console, 3000))
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(delay)
		cancel() // SIGKILL: the power cut
		res := <-done
		lines := qlLines(res.Console)
		// What the boot found.
		present := map[uint64]pcEntry{}
		var minSeq uint64 = 1 << 63
		listed := -1
		var listedBytes int64
		for _, ln := range lines {
			f := strings.Fields(ln)
			switch f[0] {
			case "CORRUPT":
				// Quarantined by the reader, never served. On a journaled
				// filesystem this never happens. On FAT, fsck may truncate
				// an entry whose store was cut between its rename and the
				// directory's fsync (it shared clusters with the temp):
				// allowed only if the store was not confirmed.
				n, _ := queue.ParseEntry(f[1])
				if e, ok := known[n.Seq]; fs != "vfat" || (ok && e.name == f[1]) {
					t.Errorf("cut %d: %s", cut, ln)
				} else {
					quarantined++
					t.Logf("cut %d: unconfirmed entry quarantined: %s", cut, ln)
				}
			case "ENTRY":
				n, err := queue.ParseEntry(f[1])
				if err != nil {
					t.Fatalf("cut %d: %v", cut, err)
				}
				present[n.Seq] = pcEntry{f[1], f[2]}
				if n.Seq < minSeq {
					minSeq = n.Seq
				}
			case "LISTED":
				listed, _ = strconv.Atoi(f[1])
				listedBytes, _ = strconv.ParseInt(f[2], 10, 64)
			}
		}
		if listed < 0 {
			t.Fatalf("cut %d: no listing; console:\n%s", cut, tail(res.Console, 3000))
		}
		sums := map[string]bool{}
		for _, e := range present {
			sums[e.sum] = true
		}
		for s := range inFlight {
			if sums[s] {
				recovered++
			}
		}
		if listed > 24 || listedBytes > 48<<10 {
			t.Errorf("cut %d: %d entries, %d bytes: over the bound (24, 48 KiB)", cut, listed, listedBytes)
		}
		if listed > maxListed {
			maxListed = listed
		}
		for seq, e := range known {
			p, ok := present[seq]
			switch {
			case ok && p != e:
				t.Errorf("cut %d: %s changed: %v, was %v", cut, e.name, p, e)
			case !ok && (len(present) == 0 || seq > minSeq):
				// Eviction is oldest first: only entries older than every
				// remaining one may be gone.
				t.Errorf("cut %d: %s (confirmed stored) is lost; present: %d entries from seq %d", cut, e.name, len(present), minSeq)
			}
		}
		// This boot's confirmed stores become known; its evictions leave.
		known = present
		inFlight = map[string]bool{}
		for _, ln := range lines {
			f := strings.Fields(ln)
			switch f[0] {
			case "PUTTING":
				inFlight[f[1]] = true
			case "PROMOTED":
				promoted++
				t.Logf("cut %d: %s", cut, ln)
			case "STORED":
				n, _ := queue.ParseEntry(f[1])
				known[n.Seq] = pcEntry{f[1], f[2]}
				delete(inFlight, f[2])
				stored++
			case "EVICTED":
				n, _ := queue.ParseEntry(f[1])
				delete(known, n.Seq)
				evicted++
			case "TEMP-REMOVED":
				t.Logf("cut %d: %s", cut, ln)
			}
		}
		if t.Failed() {
			t.Fatalf("console of cut %d:\n%s", cut, tail(res.Console, 4000))
		}
		if cut < cuts {
			inFlightTotal += len(inFlight)
		}
	}
	t.Logf("%s: %d power cuts in %v; %d stores confirmed (0 lost), %d evictions, at most %d entries listed after a cut, %d fsck repairs, %d unconfirmed entries quarantined; %d stores in flight at a cut, %d of them whole after the next boot (%d leftover files promoted)",
		fs, cuts, time.Since(start).Round(time.Second), stored, evicted, maxListed, repaired, quarantined, inFlightTotal, recovered, promoted)
}

// TestFullFilesystem: the handler meets ENOSPC: the crash is lost with a
// clear error in the log, nothing partial is left in the queue, and the
// next crash once space is back is stored.
func TestFullFilesystem(t *testing.T) {
	work := t.TempDir()
	l := newQueueLab(t, work)
	img := image(t, work, "ext4", 8)
	cfg := `[queue]
dir = "/data/queue"
min_free_kib = 0
min_free_inodes = 0
[rate_limit]
count = 0
`
	r := l.initramfs(guest.Plan{Steps: []guest.Step{
		{CorePattern: []string{"/bin/unwound-handler", "--config", "/etc/unwound/unwound.toml", "--core-pattern"}},
		{Run: []string{"/bin/queuelab", "fullfs"}, MustSucceed: true},
	}}, cfg)
	res, err := l.machine("ext4", img, work, r).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lines := qlLines(res.Console)
	var full, freed string
	var logs []string
	for _, ln := range lines {
		switch {
		case strings.HasPrefix(ln, "FULL "):
			full = ln
		case strings.HasPrefix(ln, "FREED "):
			freed = ln
		case strings.HasPrefix(ln, "LOG "):
			logs = append(logs, ln)
		}
	}
	t.Logf("%s", strings.Join(lines, "\n"))
	if full != "FULL entries=0 temps=0" {
		t.Errorf("on a full filesystem: %q, want no entry and no temp file", full)
	}
	if freed != "FREED entries=1 temps=0" {
		t.Errorf("after freeing space: %q, want the next crash stored", freed)
	}
	clear := false
	for _, l := range logs {
		if strings.Contains(l, "lost") && strings.Contains(l, "no space left on device") {
			clear = true
		}
	}
	if !clear {
		t.Errorf("no log line saying the report was lost for lack of space:\n%s", strings.Join(logs, "\n"))
	}
}

// stormCrashes is the storm's size: 200 as the issue asks.
const stormCrashes = 200

// TestCrashStorm: 200 crashes of four services, each restarted as soon as
// it is reaped (four instances per service at once), on a 128 MiB guest
// with the real handler as core_pattern. The guest stays up, the rate
// limits hold (per executable and global), stored + dropped = crashes,
// and the services are reaped (so restarted) promptly.
func TestCrashStorm(t *testing.T) {
	work := t.TempDir()
	l := newQueueLab(t, work)
	img := image(t, work, "ext4", 64)
	cfg := `[queue]
dir = "/data/queue"
[rate_limit]
count = 3
window = "1h"
per_executable = true
max_concurrent = 2
`
	// A global limit above one executable's and below all four's: with
	// count = 3 per executable and 4 executables, up to 12 reports; the
	// global limit is the same count, so the board stores 3 in all.
	r := l.initramfs(guest.Plan{Steps: []guest.Step{
		{Write: "/proc/sys/kernel/core_pipe_limit", Data: "0"},
		{CorePattern: []string{"/bin/unwound-handler", "--config", "/etc/unwound/unwound.toml", "--core-pattern"}},
		{Run: []string{"/bin/queuelab", "storm", strconv.Itoa(stormCrashes)}, MustSucceed: true},
	}}, cfg)
	res, err := l.machine("ext4", img, work, r).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var stormLine, counts, baseline string
	var clues []string
	for _, ln := range qlLines(res.Console) {
		switch {
		case strings.HasPrefix(ln, "CLUE "):
			clues = append(clues, ln)
		case strings.HasPrefix(ln, "BASELINE "):
			baseline = ln
		case strings.HasPrefix(ln, "STORM "):
			stormLine = ln
		case strings.HasPrefix(ln, "COUNTS "):
			counts = ln
		}
	}
	t.Logf("%s\n%s\n%s", baseline, stormLine, counts)
	kv := func(line, key string) string {
		m := regexp.MustCompile(`\b` + key + `=(\S*)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no %s in %q; console:\n%s", key, line, tail(res.Console, 3000))
		}
		return m[1]
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if n := atoi(kv(stormLine, "crashes")); n != stormCrashes {
		t.Errorf("%d crashes reaped, want %d", n, stormCrashes)
	}
	stored, dropped := atoi(kv(counts, "stored")), atoi(kv(counts, "dropped"))
	if stored+dropped != stormCrashes {
		t.Errorf("stored %d + dropped %d = %d, want %d; the guest's clues:\n%s", stored, dropped, stored+dropped, stormCrashes, strings.Join(clues, "\n"))
	}
	if stored > 3 {
		t.Errorf("%d reports stored over a global limit of 3 per hour", stored)
	}
	for _, pe := range strings.Split(kv(counts, "per_exe"), ",") {
		if i := strings.LastIndexByte(pe, ':'); i > 0 && atoi(pe[i+1:]) > 3 {
			t.Errorf("%s: over the per-executable limit of 3", pe)
		}
	}
	// Promptly: against the same storm with a core_pattern helper that
	// exits at once, in the same guest (TCG and the host's load make
	// absolute times meaningless).
	for _, p := range []string{"restart_ms_p50", "p90"} {
		b, h := atoi(kv(baseline, p)), atoi(kv(stormLine, p))
		if b < 1 {
			b = 1
		}
		t.Logf("crash-to-reap %s: %d ms with the handler, %d ms with a helper that exits at once: %.2fx", p, h, b, float64(h)/float64(b))
		if h > 5*b+500 {
			t.Errorf("crash-to-reap %s: %d ms with the handler vs %d ms baseline: services do not restart promptly", p, h, b)
		}
	}
	if avail := atoi(kv(stormLine, "memavail_min_kib")); avail < 16<<10 {
		t.Errorf("MemAvailable fell to %d KiB", avail)
	}
}

// BenchmarkQueueFlash stores 200 reports through the queue in a guest, on
// ext4 on the virtio disk, and writes the same bytes 200 times with a
// plain write+fsync into new files (the baseline), reading the disk's
// written sectors (/sys/block/vda/stat) around each. It reports entries
// per second and bytes written to the disk per report, each with its
// ratio to the baseline. One guest boot whatever b.N is (make bench).
func BenchmarkQueueFlash(b *testing.B) {
	if testing.Short() {
		b.Skip("boots a QEMU guest")
	}
	for _, fs := range []string{"ext4", "vfat"} {
		fs := fs
		b.Run(fs, func(b *testing.B) {
			work := b.TempDir()
			l := newQueueLab(b, work)
			img := image(b, work, fs, 64)
			const n = 200
			r := l.initramfs(guest.Plan{Steps: []guest.Step{{Run: []string{"/bin/queuelab", "bench", fs, strconv.Itoa(n)}, MustSucceed: true}}}, "")
			res, err := l.machine(fs, img, work, r).Run(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			var line string
			for _, ln := range qlLines(res.Console) {
				if strings.HasPrefix(ln, "BENCH ") {
					line = ln
				}
			}
			v := map[string]float64{}
			for _, f := range strings.Fields(line)[1:] {
				k, val, _ := strings.Cut(f, "=")
				v[k], _ = strconv.ParseFloat(val, 64)
			}
			if v["queue_ns"] == 0 || v["plain_ns"] == 0 {
				b.Fatalf("no figures: %q", line)
			}
			qRate := v["n"] / (v["queue_ns"] / 1e9)
			pRate := v["n"] / (v["plain_ns"] / 1e9)
			b.ReportMetric(qRate, "entries/s")
			b.ReportMetric(qRate/pRate, "x-plain-rate")
			b.ReportMetric(v["queue_bytes"]/v["n"], "disk-B/report")
			b.ReportMetric(v["queue_bytes"]/v["plain_bytes"], "x-plain-bytes")
			b.ReportMetric(v["payload_bytes"]/v["n"], "payload-B/report")
		})
	}
}
