package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.bug.st/serial"

	"github.com/unwound-dev/unwound/uploader/serialproto"
	"github.com/unwound-dev/unwound/uploader/serialup"
)

// receive is the host end of the serial link (docs/serial-protocol.md).
// It exits when the board says its queue is empty (unless --follow), and
// survives the adapter going away: it reopens the same path (name it by
// /dev/serial/by-id/... so a replugged adapter is found again).
func receive(args []string) error {
	fs := flag.NewFlagSet("receive", flag.ContinueOnError)
	port := fs.String("port", "", "serial `device` (e.g. /dev/ttyUSB0, or /dev/serial/by-id/...)")
	baud := fs.Int("baud", 115200, "line speed")
	flow := fs.String("flow", "none", "flow control: none or rtscts")
	out := fs.String("out", "", "`directory` for the reports (DIR/<id>.json.zst)")
	follow := fs.Bool("follow", false, "keep listening after the board's queue is empty")
	count := fs.Int("count", 0, "exit after `N` new reports (0: never)")
	idle := fs.Duration("idle", 0, "exit after this long without a frame (0: never)")
	quiet := fs.Bool("quiet", false, "log only errors")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *port == "" {
		return errors.New("receive: --port is required")
	}
	st, err := newDirStore(*out)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	logf := func(format string, args ...any) {
		if !*quiet {
			fmt.Fprintf(os.Stderr, "unwound receive: "+format+"\n", args...)
		}
	}
	p, err := serialup.Open(*port, *baud, *flow)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	host, _ := os.Hostname()
	conn := serialproto.NewConn(p)
	rc := serialproto.NewReceiver(conn, serialStore{st}, serialproto.ReceiverOptions{
		Count: *count, Idle: *idle, Follow: *follow, Name: host, Log: logf,
	})
	logf("listening on %s at %d baud, storing into %s", *port, *baud, *out)
	start := time.Now()
	var noise, corrupt int
	for {
		err = rc.Serve(ctx)
		n, c := conn.Noise()
		noise, corrupt = noise+n, corrupt+c
		p.Close()
		if err == nil || errors.Is(err, serialproto.ErrIdle) || errors.Is(err, serialproto.ErrEmpty) || ctx.Err() != nil {
			break
		}
		// The port failed (EIO: the adapter was unplugged, or the other
		// end of a pty went away): reopen the same path when it is back.
		logf("%s: %v; waiting for it to come back", *port, err)
		p, err = reopen(ctx, *port, *baud, *flow, *idle)
		if err != nil {
			break
		}
		logf("%s: reopened", *port)
		conn = serialproto.NewConn(p)
		rc.Use(conn)
	}
	fmt.Fprintf(os.Stderr, "unwound receive: %d reports stored, %d duplicates offered, %d noise lines, %d corrupt frames, %v\n",
		rc.Stored, rc.Dups, noise, corrupt, time.Since(start).Round(time.Millisecond))
	switch {
	case err == nil || errors.Is(err, serialproto.ErrEmpty) || errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, serialproto.ErrIdle):
		if *count > 0 && rc.Stored < *count {
			return fmt.Errorf("receive: %d of %d reports before stopping", rc.Stored, *count)
		}
		return nil
	}
	return fmt.Errorf("receive: %w", err)
}

// reopen opens path again, trying every half second until it works, ctx
// ends, or idle (when set) passes.
func reopen(ctx context.Context, path string, baud int, flow string, idle time.Duration) (serial.Port, error) {
	var give <-chan time.Time
	if idle > 0 {
		give = time.After(idle)
	}
	for {
		p, err := serialup.Open(path, baud, flow)
		if err == nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-give:
			return nil, fmt.Errorf("%w: %s did not come back: %v", serialproto.ErrIdle, path, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// serialStore adapts dirStore to serialproto.Store.
type serialStore struct{ s *dirStore }

func (s serialStore) Has(id serialproto.ID) bool { return s.s.has(id.String()) }

func (s serialStore) Put(id serialproto.ID, data []byte) (serialproto.Status, string, error) {
	_, stored, invalid, err := s.s.put(data, id.String())
	switch {
	case err != nil:
		return 0, "", err
	case invalid != nil:
		return serialproto.Rejected, invalid.Error(), nil
	case !stored:
		return serialproto.Duplicate, "", nil
	}
	return serialproto.Stored, "", nil
}
