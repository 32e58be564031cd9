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

// collectorSinks opens the collector receive hands reports to (by its
// directory, or a running one's URL): set where the collector is built in.
var collectorSinks func(cf *collectorFlags, dir, url, token string, logf func(string, ...any)) (receive.Sink, func() error, error)

// receive is the host end of the serial link (receive.Serial).
func receiveCmd(args []string) error {
	fs := flag.NewFlagSet("receive", flag.ContinueOnError)
	var o receive.SerialOptions
	fs.StringVar(&o.Port, "port", "", "serial `device` (e.g. /dev/ttyUSB0, or /dev/serial/by-id/...)")
	fs.IntVar(&o.Baud, "baud", 115200, "line speed")
	fs.StringVar(&o.Flow, "flow", "none", "flow control: none or rtscts")
	out := fs.String("out", "", "`directory` for the reports as files (DIR/<id>.json.zst)")
	dir := fs.String("dir", "", "hand the reports to the collector in this `directory` (as unwound serve --dir; the database is shared)")
	coll := fs.String("collector", "", "hand the reports to a running collector at this `URL` (http://host:8080), as an uploader would")
	token := fs.String("token", "", "bearer `token` for --collector (default $UNWOUND_TOKEN)")
	var cf collectorFlags
	cf.register(fs, false)
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
	o.Log = func(format string, args ...any) {
		if !*quiet {
			fmt.Fprintf(os.Stderr, "unwound receive: "+format+"\n", args...)
		}
	}
	if *dir != "" && *coll != "" {
		return errors.New("receive: --dir or --collector, not both")
	}
	// The collector first: a report the board deletes must be in the
	// database; the files are a copy.
	var sinks receive.Tee
	if *dir != "" || *coll != "" {
		if collectorSinks == nil {
			return errors.New("receive: --dir and --collector: this unwound was built without the fleet collector; use --out")
		}
		if *token == "" {
			*token = os.Getenv("UNWOUND_TOKEN")
		}
		c, closeFn, err := collectorSinks(&cf, *dir, *coll, *token, o.Log)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		defer closeFn()
		sinks = append(sinks, c)
	}
	if *out == "" && len(sinks) == 0 {
		return errors.New("receive: --out DIR, --dir DIR or --collector URL: where do the reports go?")
	}
	if *out != "" {
		st, err := receive.NewStore(*out)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		sinks = append(sinks, st)
	}
	st := oneSink(sinks)
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

// oneSink is where the reports go: a single sink itself (logs name it),
// else all of them, in order.
func oneSink(sinks receive.Tee) receive.Sink {
	if len(sinks) == 1 {
		return sinks[0]
	}
	return sinks
}
