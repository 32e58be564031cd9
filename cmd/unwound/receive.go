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

	"github.com/unwound-dev/unwound/host/receive"
)

// receive is the host end of the serial link (receive.Serial).
func receiveCmd(args []string) error {
	fs := flag.NewFlagSet("receive", flag.ContinueOnError)
	var o receive.SerialOptions
	fs.StringVar(&o.Port, "port", "", "serial `device` (e.g. /dev/ttyUSB0, or /dev/serial/by-id/...)")
	fs.IntVar(&o.Baud, "baud", 115200, "line speed")
	fs.StringVar(&o.Flow, "flow", "none", "flow control: none or rtscts")
	out := fs.String("out", "", "`directory` for the reports (DIR/<id>.json.zst)")
	fs.BoolVar(&o.Follow, "follow", false, "keep listening after the board's queue is empty")
	fs.IntVar(&o.Count, "count", 0, "exit after `N` new reports (0: never)")
	fs.DurationVar(&o.Idle, "idle", 0, "exit after this long without a frame (0: never)")
	quiet := fs.Bool("quiet", false, "log only errors")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Port == "" {
		return errors.New("receive: --port is required")
	}
	st, err := receive.NewStore(*out)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	o.Log = func(format string, args ...any) {
		if !*quiet {
			fmt.Fprintf(os.Stderr, "unwound receive: "+format+"\n", args...)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := receive.Serial(ctx, st, o)
	fmt.Fprintf(os.Stderr, "unwound receive: %d reports stored, %d duplicates offered, %d noise lines, %d corrupt frames, %v\n",
		res.Stored, res.Dups, res.Noise, res.Corrupt, time.Since(start).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	return nil
}
