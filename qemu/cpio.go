// Package qemu is unwound's core lab: it builds minimal kernels
// (kernel/build.sh), packs initramfs images, boots them under
// qemu-system-{aarch64,arm,riscv64,x86_64} and collects what the guest
// ships back (cores, reports) over a virtio serial port. See docs/qemu-lab.md.
package qemu

import (
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// Initramfs is an in-memory newc cpio archive: no root needed to build one.
type Initramfs struct {
	entries map[string]entry
}

type entry struct {
	mode         uint32 // type and permission bits
	data         []byte
	hostPath     string
	major, minor uint32
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChr  = 0o020000
	modeLink = 0o120000
)

// NewInitramfs returns an archive holding /dev/console and /dev/null, which
// the kernel and the Go runtime need before devtmpfs is mounted.
func NewInitramfs() *Initramfs {
	r := &Initramfs{entries: map[string]entry{}}
	r.Device("/dev/console", 5, 1)
	r.Device("/dev/null", 1, 3)
	return r
}

// Dir adds a directory.
func (r *Initramfs) Dir(p string) {
	p = clean(p)
	if p == "" {
		return
	}
	r.Dir(path.Dir("/" + p))
	if _, ok := r.entries[p]; !ok {
		r.entries[p] = entry{mode: modeDir | 0o755}
	}
}

// File adds a file with the given permission bits.
func (r *Initramfs) File(p string, perm uint32, data []byte) {
	p = clean(p)
	r.Dir(path.Dir("/" + p))
	r.entries[p] = entry{mode: modeFile | perm, data: data}
}

// HostFile adds a file read from the host when the archive is written.
func (r *Initramfs) HostFile(p string, perm uint32, host string) {
	p = clean(p)
	r.Dir(path.Dir("/" + p))
	r.entries[p] = entry{mode: modeFile | perm, hostPath: host}
}

// Symlink adds a symbolic link.
func (r *Initramfs) Symlink(p, target string) {
	p = clean(p)
	r.Dir(path.Dir("/" + p))
	r.entries[p] = entry{mode: modeLink | 0o777, data: []byte(target)}
}

// Device adds a character device node.
func (r *Initramfs) Device(p string, major, minor uint32) {
	p = clean(p)
	r.Dir(path.Dir("/" + p))
	r.entries[p] = entry{mode: modeChr | 0o600, major: major, minor: minor}
}

func clean(p string) string { return strings.TrimPrefix(path.Clean("/"+p), "/") }

// WriteTo writes the archive in the "newc" format the kernel unpacks
// (Documentation/driver-api/early-userspace/buffer-format.rst); parents come
// before children.
func (r *Initramfs) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	cw := &countWriter{w: w}
	ino := uint32(1)
	for _, n := range names {
		e := r.entries[n]
		data := e.data
		if e.hostPath != "" {
			b, err := os.ReadFile(e.hostPath)
			if err != nil {
				return cw.n, err
			}
			data = b
		}
		if err := writeEntry(cw, n, e, data, ino); err != nil {
			return cw.n, err
		}
		ino++
	}
	err := writeEntry(cw, "TRAILER!!!", entry{}, nil, 0)
	return cw.n, err
}

func writeEntry(w *countWriter, name string, e entry, data []byte, ino uint32) error {
	nlink := uint32(1)
	if e.mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.mode, 0, 0, nlink, 0, len(data), 0, 0, e.major, e.minor, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"); err != nil {
		return err
	}
	w.pad()
	if _, err := w.Write(data); err != nil {
		return err
	}
	w.pad()
	return w.err
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

func (c *countWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.Write(make([]byte, 4-r))
	}
}
