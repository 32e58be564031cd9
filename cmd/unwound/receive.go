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

	"github.com/unwound-dev/unwound/uploader/serialproto"
	"github.com/unwound-dev/unwound/uploader/serialup"
)

// receive is the host end of the serial link (docs/serial-protocol.md).
func receive(args []string) error {
	fs := flag.NewFlagSet("receive", flag.ContinueOnError)
	port := fs.String("port", "", "serial `device` (e.g. /dev/ttyUSB0)")
	baud := fs.Int("baud", 115200, "line speed")
	flow := fs.String("flow", "none", "flow control: none or rtscts")
	out := fs.String("out", "", "`directory` for the reports (DIR/<id>.json.zst)")
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
	p, err := serialup.Open(*port, *baud, *flow)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	defer p.Close()
	logf := func(format string, args ...any) {
		if !*quiet {
			fmt.Fprintf(os.Stderr, "unwound receive: "+format+"\n", args...)
		}
	}
	host, _ := os.Hostname()
	conn := serialproto.NewConn(p)
	rc := serialproto.NewReceiver(conn, serialStore{st}, serialproto.ReceiverOptions{
		Count: *count, Idle: *idle, Name: host, Log: logf,
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf("listening on %s at %d baud, storing into %s", *port, *baud, *out)
	start := time.Now()
	err = rc.Serve(ctx)
	noise, corrupt := conn.Noise()
	fmt.Fprintf(os.Stderr, "unwound receive: %d reports stored, %d duplicates offered, %d noise lines, %d corrupt frames, %v\n",
		rc.Stored, rc.Dups, noise, corrupt, time.Since(start).Round(time.Millisecond))
	if errors.Is(err, serialproto.ErrIdle) || errors.Is(err, context.Canceled) {
		if *count > 0 && rc.Stored < *count {
			return fmt.Errorf("receive: %d of %d reports before stopping", rc.Stored, *count)
		}
		return nil
	}
	return err
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
