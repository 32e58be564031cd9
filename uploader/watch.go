package uploader

import (
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/queue"
)

// Watch reports on the returned channel when an entry appears in dir
// (the handler renames entries into place: IN_MOVED_TO; IN_CLOSE_WRITE for
// tools that copy). stop ends the watch.
func Watch(dir string) (<-chan struct{}, func(), error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: the runtime poller reads it, Close wakes it
	ch := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
				l := int(binary.NativeEndian.Uint32(b[12:16]))
				end := unix.SizeofInotifyEvent + l
				if end > len(b) {
					break
				}
				name := b[unix.SizeofInotifyEvent:end]
				for len(name) > 0 && name[len(name)-1] == 0 {
					name = name[:len(name)-1]
				}
				if _, ok := queue.ParseName(string(name)); ok {
					select {
					case ch <- struct{}{}:
					default:
					}
				}
				b = b[end:]
			}
		}
	}()
	return ch, func() { f.Close() }, nil
}
