package coredump

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

type realCore struct {
	path, exe string
	tid       int // the crashing thread
}

// makeRealCore compiles testdata/crash.c with cc and runs it (through run,
// e.g. qemu) in a temporary directory with core dumps enabled. pattern
// names the core file the run leaves.
func makeRealCore(t *testing.T, cc []string, run []string, pattern string) realCore {
	t.Helper()
	tools := []string{cc[0]}
	if len(run) > 0 {
		tools = append(tools, run[0])
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	start := time.Now()
	dir := t.TempDir()
	src, err := filepath.Abs("testdata/crash.c")
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "crash")
	args := append(append([]string{}, cc[1:]...), "-O0", "-pthread", "-o", exe, src)
	if out, err := exec.Command(cc[0], args...).CombinedOutput(); err != nil {
		t.Skipf("%s: %v\n%s", cc[0], err, out)
	}
	script := "ulimit -c unlimited && exec " + strings.Join(run, " ") + " ./crash"
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the crasher exited normally: %s", out)
	}
	ms, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(ms) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "*"))
		t.Skipf("no core %s written (core_pattern %q?): %v", pattern, readFile("/proc/sys/kernel/core_pattern"), all)
	}
	tid, err := strconv.Atoi(strings.TrimSpace(readFile(filepath.Join(dir, "tid"))))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); testing.Short() && d > 2*time.Second {
		t.Skipf("generating the core took %v", d)
	}
	return realCore{ms[0], exe, tid}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// gdbPC is what gdb reports as the crashing thread's pc.
func gdbPC(t *testing.T, exe, core string) uint64 {
	t.Helper()
	if _, err := exec.LookPath("gdb-multiarch"); err != nil {
		t.Skip("gdb-multiarch not installed")
	}
	out := testutil.Run(t, "gdb-multiarch", "-nx", "-batch", "-ex", "p/x $pc", exe, core)
	m := regexp.MustCompile(`(?m)^\$1 = 0x([0-9a-f]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("gdb said:\n%s", out)
	}
	pc, _ := strconv.ParseUint(string(m[1]), 16, 64)
	return pc
}

func openReal(t *testing.T, path string) (*Core, *FileMemory, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, fm, err := OpenFile(bytes.NewReader(b), int64(len(b)), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return c, fm, b
}

// checkPipe reads the core's bytes through a pipe and compares with
// OpenFile.
func checkPipe(t *testing.T, core []byte, fc *Core, fm *FileMemory) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		pw.Write(core)
		pw.Close()
	}()
	defer pr.Close()
	c, s, err := ReadHeader(pr, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, fc) {
		t.Errorf("ReadHeader on a pipe differs from OpenFile:\n%+v\n%+v", c, fc)
	}
	// Keep the first and last 256 bytes of every segment.
	m, err := s.Collect(c.Segments, func(sg Segment) []Range {
		if sg.Filesz < 512 {
			return []Range{{sg.Vaddr, sg.Vaddr + sg.Filesz}}
		}
		return []Range{{sg.Vaddr, sg.Vaddr + 256}, {sg.Vaddr + sg.Filesz - 256, sg.Vaddr + sg.Filesz}}
	}, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sg := range c.Segments {
		if sg.Filesz == 0 {
			continue
		}
		k := uint64(256)
		if sg.Filesz < k {
			k = sg.Filesz
		}
		a, b := make([]byte, k), make([]byte, k)
		if _, err := m.ReadAt(a, int64(sg.Vaddr)); err != nil {
			t.Fatalf("%#x: %v", sg.Vaddr, err)
		}
		if _, err := fm.ReadAt(b, int64(sg.Vaddr)); err != nil {
			t.Fatalf("%#x: %v", sg.Vaddr, err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%#x: pipe and file memory differ", sg.Vaddr)
		}
		n++
	}
	if n == 0 {
		t.Error("no segment data")
	}
}

func checkThreads(t *testing.T, c *Core, rc realCore, pcIndex int, wantVDSO bool) {
	t.Helper()
	if len(c.Threads) != 3 {
		t.Errorf("%d threads, want 3", len(c.Threads))
	}
	th := c.Threads[0]
	if th.TID != rc.tid {
		t.Errorf("first thread %d, crashed %d", th.TID, rc.tid)
	}
	if th.Signal != 11 {
		t.Errorf("first thread's signal %d", th.Signal)
	}
	pc := gdbPC(t, rc.exe, rc.path)
	if got := th.Regs[pcIndex]; got != pc {
		t.Errorf("pc %#x, gdb says %#x", got, pc)
	}
	if v, ok := c.AuxvValue(AT_SYSINFO_EHDR); (!ok && wantVDSO) || (ok && v == 0) {
		t.Errorf("AT_SYSINFO_EHDR %#x %v", v, ok)
	} else if !ok {
		t.Logf("no AT_SYSINFO_EHDR (qemu before 8.1 gives aarch64 guests no vDSO)")
	}
	if v, _ := c.AuxvValue(AT_PAGESZ); v != 4096 {
		t.Errorf("AT_PAGESZ %d", v)
	}
	if ef, err := elf.Open(rc.exe); err == nil {
		// AT_ENTRY is the executable's entry point, relocated for a PIE.
		v, _ := c.AuxvValue(AT_ENTRY)
		if ef.Type == elf.ET_EXEC && v != ef.Entry || v%4096 != ef.Entry%4096 {
			t.Errorf("AT_ENTRY %#x, e_entry %#x", v, ef.Entry)
		}
		ef.Close()
	}
	if c.PRPSInfo == nil || c.PRPSInfo.Fname != "crash" {
		t.Errorf("prpsinfo %+v", c.PRPSInfo)
	}
}

func TestRealCoreX86_64(t *testing.T) {
	if !strings.HasPrefix(readFile("/proc/sys/kernel/core_pattern"), "core") {
		t.Skip("core_pattern does not write ./core")
	}
	if exe, _ := os.Executable(); exe == "" || !isArch(exe, elf.EM_X86_64) {
		t.Skip("host is not x86_64")
	}
	rc := makeRealCore(t, []string{"gcc"}, nil, "core*")
	c, fm, core := openReal(t, rc.path)
	if c.Machine != elf.EM_X86_64 || c.Class != elf.ELFCLASS64 {
		t.Fatalf("%v %v", c.Machine, c.Class)
	}
	checkThreads(t, c, rc, 16, true)
	if c.SigInfo == nil || c.SigInfo.Signo != 11 || c.SigInfo.Addr != 0 {
		t.Errorf("siginfo %+v", c.SigInfo)
	}
	var exe, libc bool
	for _, f := range c.Files {
		exe = exe || f.Path == rc.exe
		libc = libc || strings.Contains(filepath.Base(f.Path), "libc")
		if f.End <= f.Start || f.Offset%4096 != 0 {
			t.Errorf("NT_FILE entry %+v", f)
		}
	}
	if !exe || !libc {
		t.Errorf("NT_FILE lacks the executable or libc: %+v", c.Files)
	}
	checkPipe(t, core, c, fm)
}

func TestRealCoreAArch64QEMU(t *testing.T) {
	rc := makeRealCore(t, []string{"aarch64-linux-gnu-gcc", "-static"}, []string{"qemu-aarch64", "-cpu", "cortex-a72"}, "qemu_*.core")
	c, fm, core := openReal(t, rc.path)
	if c.Machine != elf.EM_AARCH64 || c.Class != elf.ELFCLASS64 {
		t.Fatalf("%v %v", c.Machine, c.Class)
	}
	checkThreads(t, c, rc, 32, false)
	checkPipe(t, core, c, fm)
	t.Logf("qemu core: %d segments, %d files, siginfo %v", len(c.Segments), len(c.Files), c.SigInfo)
}

func isArch(path string, m elf.Machine) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Machine == m
}
