package handler

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// Logger writes one line per message. In kernel mode stdout and stderr are
// closed, so it writes to /dev/kmsg (one write per record, as kmsg wants),
// with a syslog priority prefix.
type Logger struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	kmsg   bool
}

// Syslog priorities used in /dev/kmsg records.
const (
	prioErr     = 3
	prioWarning = 4
	prioInfo    = 6
)

// NewKmsgLogger logs to /dev/kmsg, falling back to nothing.
func NewKmsgLogger() *Logger {
	l := &Logger{prefix: fmt.Sprintf("unwound-handler[%d]: ", os.Getpid()), kmsg: true, w: io.Discard}
	if f, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); err == nil {
		l.w = f
	}
	return l
}

// NewLogger logs to w (stderr in offline mode).
func NewLogger(w io.Writer) *Logger {
	return &Logger{w: w, prefix: "unwound-handler: "}
}

func (l *Logger) log(prio int, format string, args ...any) {
	if l == nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if len(msg) > 900 {
		msg = msg[:900] + "…" // /dev/kmsg rejects records over 1 KiB
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kmsg {
		fmt.Fprintf(l.w, "<%d>%s%s\n", prio, l.prefix, msg)
	} else {
		fmt.Fprintf(l.w, "%s%s\n", l.prefix, msg)
	}
}

// passthrough is where a supervised child's stderr is copied, nil when l
// logs to /dev/kmsg (the child opens /dev/kmsg itself: its stderr holds
// only the runtime's last words). Writes never fail, so a log that cannot
// be written never blocks the child.
func (l *Logger) passthrough() io.Writer {
	if l == nil || l.kmsg {
		return nil
	}
	return lockedWriter{l}
}

type lockedWriter struct{ l *Logger }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	w.l.w.Write(p)
	return len(p), nil
}

// Infof logs progress worth keeping.
//
//go:noinline
func (l *Logger) Infof(format string, args ...any) { l.log(prioInfo, format, args...) }

// Warnf logs something that degraded the report.
//
//go:noinline
func (l *Logger) Warnf(format string, args ...any) { l.log(prioWarning, format, args...) }

// Errorf logs something that lost part of a report.
//
//go:noinline
func (l *Logger) Errorf(format string, args ...any) { l.log(prioErr, format, args...) }
