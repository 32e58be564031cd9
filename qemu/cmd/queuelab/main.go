// Command queuelab runs inside the core lab's guests for the queue tests
// (qemu/queue_test.go). It mounts the queue's filesystem (ext4 or VFAT on
// the virtio disk, UBIFS on the CFI flash through UBI), and then:
//
//	queuelab powercut FS   recover and list the queue (every entry read
//	                       through the validating reader), then store
//	                       reports for ever; the host cuts the power
//	queuelab fullfs        fill the filesystem, crash, check nothing is
//	                       left, free space, crash again
//	queuelab storm N       N crashes of several services at once under
//	                       the handler, then the counts
//	queuelab nop           a core_pattern helper that exits at once (baseline)
//	queuelab bench N       N stores through the queue and N plain
//	                       write+fsync of the same bytes, with the disk's
//	                       sectors written for each
//
// Every fact goes to the console as one "QL-…" line; the host parses them.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/qemu/guest"
	"github.com/unwound-dev/unwound/queue"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// console carries the facts the host parses.
var console = guest.Console{Prefix: "QL-"}

func main() {
	if len(os.Args) < 2 {
		console.Fail("usage: queuelab powercut|fullfs|storm|bench")
	}
	switch os.Args[1] {
	case "nop":
		// The baseline core_pattern helper: exits at once, which ends the dump.
		return
	case "powercut":
		mountFS(os.Args[2])
		powercut()
	case "fullfs":
		mountFS("ext4")
		fullFS()
	case "storm":
		mountFS("ext4")
		n, _ := strconv.Atoi(os.Args[2])
		storm(n)
	case "bench":
		mountFS(os.Args[2])
		n, _ := strconv.Atoi(os.Args[3])
		bench(n)
	default:
		console.Fail("unknown mode %q", os.Args[1])
	}
}

const (
	mnt  = "/data"
	qdir = "/data/queue"
)

// mountFS mounts the queue's filesystem at /data and creates the queue
// directory on the first boot (what a package does).
func mountFS(fs string) {
	os.MkdirAll(mnt, 0o755)
	var err error
	switch fs {
	case "ext4", "vfat":
		err = syscall.Mount("/dev/vda", mnt, fs, 0, "")
	case "jffs2":
		// JFFS2 mounts the erased NOR flash directly.
		err = syscall.Mount("mtd0", mnt, "jffs2", 0, "")
	case "ubifs":
		if err = ubiVolume(); err == nil {
			err = syscall.Mount("ubi0:queue", mnt, "ubifs", 0, "")
		}
	default:
		console.Fail("unknown filesystem %q", fs)
	}
	if err != nil {
		console.Fail("mount %s: %v", fs, err)
	}
	if _, err := os.Stat(qdir); err != nil {
		if err := os.Mkdir(qdir, 0o700); err != nil {
			console.Fail("mkdir: %v", err)
		}
		syncDir(mnt)
	}
	console.Say("MOUNTED %s", fs)
}

// ubiVolume makes the UBI volume "queue" on ubi0 (attached by the kernel
// from ubi.mtd=0, which formats an erased flash) when it does not exist:
// UBI_IOCMKVOL on /dev/ubi0, what ubimkvol does (include/uapi/mtd/ubi-user.h).
func ubiVolume() error {
	if n, _ := os.ReadFile("/sys/class/ubi/ubi0/volumes_count"); strings.TrimSpace(string(n)) != "0" {
		return nil
	}
	num := func(name string) int64 {
		b, _ := os.ReadFile("/sys/class/ubi/ubi0/" + name)
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v
	}
	var req struct {
		VolID     int32
		Alignment int32
		Bytes     int64
		VolType   int8
		Flags     uint8
		NameLen   int16
		Padding2  [4]int8
		Name      [128]byte
	}
	req.VolID = -1 // UBI_VOL_NUM_AUTO
	req.Alignment = 1
	req.Bytes = num("avail_eraseblocks") * num("eraseblock_size")
	req.VolType = 3 // UBI_DYNAMIC_VOLUME
	req.NameLen = int16(copy(req.Name[:], "queue"))
	const size = unsafe.Sizeof(req)
	if size != 152 {
		return fmt.Errorf("ubi_mkvol_req is %d bytes, want 152", size)
	}
	const iocMkvol = 1<<30 | size<<16 | 'o'<<8 // _IOW('o', 0, struct ubi_mkvol_req): command number 0
	f, err := os.OpenFile("/dev/ubi0", os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), iocMkvol, uintptr(unsafe.Pointer(&req))); e != 0 {
		return fmt.Errorf("UBI_IOCMKVOL: %v", e)
	}
	console.Say("UBI volume of %d bytes made", req.Bytes)
	return nil
}

func syncDir(d string) {
	if f, err := os.Open(d); err == nil {
		f.Sync()
		f.Close()
	}
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// Bounds of the power-cut queue, shared with the host test.
const (
	pcMaxEntries = 24
	pcMaxBytes   = 48 << 10
)

// powercut checks what the previous boot left, then writes until the host
// kills the machine. A "STORED" line is printed only after Put returned,
// that is after the rename and the directory's fsync.
func powercut() {
	q, err := queue.Open(qdir, queue.Options{Check: decode.Entry, MaxEntries: pcMaxEntries, MaxBytes: pcMaxBytes})
	if err != nil {
		console.Fail("%v", err)
	}
	rec, err := q.Recover(bootID())
	if err != nil {
		console.Fail("recover: %v", err)
	}
	for _, t := range rec.TempsRemoved {
		console.Say("TEMP-REMOVED %s", t)
	}
	for _, p := range rec.Promoted {
		console.Say("PROMOTED %s %s", p[0], p[1])
	}
	for _, c := range rec.Quarantined {
		b, _ := os.ReadFile(filepath.Join(qdir, queue.QuarantineDir, c.Name))
		head := b
		if len(head) > 16 {
			head = head[:16]
		}
		console.Say("CORRUPT %s %v (%d bytes: %x)", c.Name, c.Err, len(b), head)
	}
	es, err := q.List()
	if err != nil {
		console.Fail("list: %v", err)
	}
	var total int64
	for _, e := range es {
		b, err := q.Read(e.Name)
		if err != nil {
			console.Say("CORRUPT %s %v", e.Name, err)
			continue
		}
		total += int64(len(b))
		console.Say("ENTRY %s %s", e.Name, sum(b))
	}
	console.Say("LISTED %d %d", len(es), total)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	boot := bootID()
	var wg sync.WaitGroup
	// Concurrent writers, as a storm of handlers would be.
	for w := 0; w < 3; w++ {
		seed := rng.Int63()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(seed))
			for i := 0; ; i++ {
				data := fakeReport(r)
				console.Say("PUTTING %s", sum(data))
				res, err := q.Put(data, boot)
				if err != nil {
					console.Say("PUT-ERROR %v", err)
					time.Sleep(100 * time.Millisecond)
					continue
				}
				for _, e := range res.Evicted {
					console.Say("EVICTED %s", e)
				}
				console.Say("STORED %s %s", res.Name, sum(data))
			}
		}()
	}
	console.Say("WRITING")
	wg.Wait()
}

// fakeReport is a report-shaped entry of random size (0.3–6 KiB
// compressed: random hex does not compress much).
func fakeReport(r *rand.Rand) []byte {
	pcs := make([]string, 20+r.Intn(400))
	for i := range pcs {
		pcs[i] = fmt.Sprintf("0x%x", r.Uint64()>>16)
	}
	js, _ := json.Marshal(map[string]any{"version": 1, "id": fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()), "pcs": pcs})
	return report.Compress(js)
}

// crashOnce runs a crashing program and waits for it (the kernel holds
// the reap until the core is piped: with the handler dropping early it is
// quick), returning how long from start to reap.
func crashOnce(path string) time.Duration {
	start := time.Now()
	exec.Command(path).Run()
	return time.Since(start)
}

// handlersRunning counts unwound-handler processes.
func handlersRunning() int {
	n := 0
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		if c, err := os.ReadFile("/proc/" + d.Name() + "/comm"); err == nil && strings.TrimSpace(string(c)) == "unwound-handler" {
			n++
		}
	}
	return n
}

func waitHandlers() {
	for end := time.Now().Add(120 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if handlersRunning() == 0 {
			return
		}
	}
	console.Fail("handlers still running after 120 s")
}

// kmsgHandlerLines returns the handler's log records so far.
func kmsgHandlerLines() []string {
	return guest.KmsgRecords(func(rec string) bool { return strings.Contains(rec, "unwound-handler") })
}

func entryNames() (entries, temps []string) {
	des, _ := os.ReadDir(qdir)
	for _, d := range des {
		switch {
		case strings.HasPrefix(d.Name(), ".tmp-"):
			temps = append(temps, d.Name())
		case strings.HasSuffix(d.Name(), report.Suffix):
			entries = append(entries, d.Name())
		}
	}
	return entries, temps
}

// fullFS: a crash on a full filesystem is lost with a clear error and
// leaves nothing behind; once space returns the next crash is stored.
func fullFS() {
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		console.Fail("%v", err)
	}
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			break
		}
	}
	// The last partial blocks too.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	f.Sync()
	f.Close()
	var st syscall.Statfs_t
	syscall.Statfs(mnt, &st)
	console.Say("FILLED %d bytes, %d blocks free", n, st.Bfree)
	kmsgHandlerLines() // skip what is there
	crashOnce("/bin/svc0")
	waitHandlers()
	ents, temps := entryNames()
	console.Say("FULL entries=%d temps=%d", len(ents), len(temps))
	for _, l := range kmsgHandlerLines() {
		console.Say("LOG %s", l)
	}
	os.Remove(filler)
	syncDir(mnt)
	crashOnce("/bin/svc1")
	waitHandlers()
	ents, temps = entryNames()
	console.Say("FREED entries=%d temps=%d", len(ents), len(temps))
	for _, l := range kmsgHandlerLines() {
		console.Say("LOG %s", l)
	}
}

// storm first crashes n times with a helper that exits at once as
// core_pattern (the baseline: what a crash costs with no reporter), then n
// times with the core_pattern the plan set (the handler), and prints the
// crash-to-reap figures of both and the counts.
func storm(n int) {
	const cp = "/proc/sys/kernel/core_pattern"
	handler, err := os.ReadFile(cp)
	if err != nil {
		console.Fail("%v", err)
	}
	if err := os.WriteFile(cp, []byte("|/bin/queuelab nop"), 0o644); err != nil {
		console.Fail("%v", err)
	}
	p50, p90, p99, _, _ := crashStorm(n)
	console.Say("BASELINE crashes=%d restart_ms_p50=%d p90=%d p99=%d", n, p50, p90, p99)
	if err := os.WriteFile(cp, handler, 0o644); err != nil {
		console.Fail("%v", err)
	}
	stormCounts(n)
}

// crashStorm crashes n times, spread over services /bin/svc0..3 that
// restart as soon as they are reaped, four instances of each at once, and
// returns crash-to-reap percentiles in ms, the most handlers seen at once
// and the lowest MemAvailable.
func crashStorm(n int) (p50, p90, p99 int64, maxH int, minAvail int64) {
	services, _ := filepath.Glob("/bin/svc*")
	sort.Strings(services)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		perSvc    = map[string]int{}
		left      = n
	)
	minAvail = 1 << 62
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if h := handlersRunning(); h > maxH {
				maxH = h
			}
			if a := memAvailable(); a < minAvail {
				minAvail = a
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	// Four supervisors per service: restarts overlap, as several
	// instances of a crash-looping program would.
	for _, s := range services {
		for k := 0; k < 4; k++ {
			wg.Add(1)
			go func(s string) {
				defer wg.Done()
				for {
					mu.Lock()
					if left == 0 {
						mu.Unlock()
						return
					}
					left--
					mu.Unlock()
					d := crashOnce(s)
					mu.Lock()
					latencies = append(latencies, d)
					perSvc[s]++
					mu.Unlock()
				}
			}(s)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	waitHandlers()
	close(stop)
	<-sampled
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) int64 { return latencies[int(p*float64(len(latencies)-1))].Milliseconds() }
	console.Say("STORM crashes=%d seconds=%.2f restart_ms_p50=%d p90=%d p99=%d max=%d handlers_max=%d memavail_min_kib=%d",
		len(latencies), elapsed.Seconds(), pct(0.5), pct(0.9), pct(0.99), pct(1), maxH, minAvail)
	return pct(0.5), pct(0.9), pct(0.99), maxH, minAvail
}

// stormCounts runs the storm under the handler and prints what the queue
// holds and the drops the reports and the admission state carry.
func stormCounts(n int) {
	crashStorm(n)
	q, err := queue.Open(qdir, queue.Options{Check: decode.Entry})
	if err != nil {
		console.Fail("%v", err)
	}
	es, _ := q.List()
	dropped := map[string]int{}
	perExe := map[string]int{}
	for _, e := range es {
		b, err := q.Read(e.Name)
		if err != nil {
			console.Fail("read %s: %v", e.Name, err)
		}
		r, err := decode.Report(b)
		if r == nil {
			console.Fail("decode %s: %v", e.Name, err)
		}
		perExe[r.Exe]++
		for k, v := range r.Dropped {
			dropped[k] += v
		}
	}
	for k, v := range admit.Pending("/run/unwound") {
		dropped[k] += v
	}
	total := 0
	for _, v := range dropped {
		total += v
	}
	var pe []string
	for k, v := range perExe {
		pe = append(pe, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(pe)
	var dr []string
	for k, v := range dropped {
		dr = append(dr, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(dr)
	console.Say("COUNTS stored=%d dropped=%d per_exe=%s drops=%s", len(es), total, strings.Join(pe, ","), strings.Join(dr, ","))
	if len(es)+total != n {
		// A crash neither stored nor counted: say what the kernel and
		// the handlers logged, less the drops (one line each), and what
		// the queue set aside, so that the host's failure says why.
		for _, rec := range guest.KmsgRecords(stormClue) {
			console.Say("CLUE %s", rec)
		}
		qs, _ := os.ReadDir(filepath.Join(qdir, queue.QuarantineDir))
		temps, _ := filepath.Glob(filepath.Join(qdir, ".tmp-*"))
		console.Say("CLUE quarantined=%d temps=%d", len(qs), len(temps))
	}
}

// stormClue keeps the kernel log records that can explain a crash the
// storm lost: the handlers' lines but the drops, the OOM killer's, and
// the kernel's own about core dumps.
func stormClue(rec string) bool {
	if strings.Contains(rec, "unwound-handler") {
		return !strings.Contains(rec, "crash not reported:")
	}
	for _, k := range []string{"oom", "Killed process", "Core dump", "core dump", "coredump"} {
		if strings.Contains(rec, k) {
			return true
		}
	}
	return false
}

func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// sectorsWritten reads the disk's written-sectors counter
// (Documentation/block/stat.rst, field 7).
func sectorsWritten(dev string) int64 {
	b, err := os.ReadFile("/sys/block/" + dev + "/stat")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return -1
	}
	v, _ := strconv.ParseInt(f[6], 10, 64)
	return v
}

// bench stores n reports through the queue, then writes the same bytes n
// times with a plain write+fsync into new files (the baseline), and prints
// the time and the disk's written bytes of each.
func bench(n int) {
	q, err := queue.Open(qdir, queue.Options{Check: decode.Entry, MaxEntries: n + 1, MaxBytes: 1 << 30})
	if err != nil {
		console.Fail("%v", err)
	}
	r := rand.New(rand.NewSource(1))
	data := make([][]byte, n)
	var size int64
	for i := range data {
		data[i] = fakeReport(r)
		size += int64(len(data[i]))
	}
	boot := bootID()
	syscall.Sync()
	s0, t0 := sectorsWritten("vda"), time.Now()
	for _, d := range data {
		if _, err := q.Put(d, boot); err != nil {
			console.Fail("put: %v", err)
		}
	}
	syscall.Sync()
	qs, qt := sectorsWritten("vda")-s0, time.Since(t0)
	base := filepath.Join(mnt, "plain")
	os.Mkdir(base, 0o700)
	s0, t0 = sectorsWritten("vda"), time.Now()
	for i, d := range data {
		f, err := os.Create(filepath.Join(base, strconv.Itoa(i)))
		if err != nil {
			console.Fail("%v", err)
		}
		f.Write(d)
		f.Sync()
		f.Close()
	}
	syscall.Sync()
	bs, bt := sectorsWritten("vda")-s0, time.Since(t0)
	console.Say("BENCH n=%d payload_bytes=%d queue_ns=%d queue_bytes=%d plain_ns=%d plain_bytes=%d", n, size, qt.Nanoseconds(), qs*512, bt.Nanoseconds(), bs*512)
}
