package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/unwound-dev/unwound/host/sentry"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/report/decode"
)

func init() { fleetCmds["sentry"] = sentryCmd }

const sentryUsage = `usage: unwound sentry send [--dsn DSN] [--debug-dir DIR]... [--sysroot DIR] [--timeout D] REPORT...

Sends each report to Sentry as a native event (docs/sentry.md). The DSN
comes from --dsn, else from SENTRY_DSN, as Sentry's own tools read it.
With --debug-dir the frames are symbolized here; without, Sentry
symbolizes them from the files uploaded with sentry-cli debug-files upload.
`

// sentryCmd is `unwound sentry send`.
func sentryCmd(args []string) error {
	if len(args) == 0 || args[0] != "send" {
		fmt.Fprint(os.Stderr, sentryUsage)
		return fmt.Errorf("sentry: want the subcommand send")
	}
	fs := flag.NewFlagSet("sentry send", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), sentryUsage); fs.PrintDefaults() }
	dsnFlag := fs.String("dsn", "", "Sentry `DSN` (default $SENTRY_DSN)")
	var dirs multiFlag
	fs.Var(&dirs, "debug-dir", "symbolize with debug files from this `directory` (.build-id tree, <dir>/<path>.debug); repeatable")
	sysroot := fs.String("sysroot", "/", "with --debug-dir: the target's root filesystem `dir`")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up on a report after this `long`, retries included")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("sentry send: name at least one report file")
	}
	raw := *dsnFlag
	if raw == "" {
		raw = os.Getenv("SENTRY_DSN")
	}
	dsn, err := sentry.ParseDSN(raw)
	if err != nil {
		return err
	}
	var sym *symbolize.Symbolizer
	if len(dirs) > 0 {
		sym = symbolize.New(symbolize.Options{DebugDirs: dirs, Sysroot: *sysroot, Debuginfod: symbolize.DebuginfodFromEnv()})
		defer sym.Close()
	}
	client := &sentry.Client{DSN: dsn}
	failed := 0
	for _, name := range fs.Args() {
		if err := sendOne(client, sym, name, *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "unwound:", err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d reports not sent", failed, fs.NArg())
	}
	return nil
}

func sendOne(c *sentry.Client, sym *symbolize.Symbolizer, name string, timeout time.Duration) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	r, err := decode.Report(b)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	in := sentry.Input{Report: r, Raw: b, Received: time.Now()}
	if sym != nil {
		in.Symbols = sym.Symbolize(r)
	}
	ev, err := sentry.NewEvent(in)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	payload, err := ev.Payload()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res := c.SendRetrying(ctx, ev.EventID, payload, time.Second, 30*time.Second)
	if res.Outcome != sentry.Sent {
		return fmt.Errorf("%s: %v", name, res.Err)
	}
	fmt.Printf("%s: report %s sent as event %s\n", name, r.ID, ev.EventID)
	return nil
}

// newSentryForwarder starts forwarding to the Sentry at dsnText, with its
// outbox in dir/sentry; nil without a DSN.
func newSentryForwarder(dsnText, dir string) (*sentry.Forwarder, error) {
	if dsnText == "" {
		return nil, nil
	}
	dsn, err := sentry.ParseDSN(dsnText)
	if err != nil {
		return nil, fmt.Errorf("--forward-sentry: %w", err)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "unwound serve: "+format+"\n", args...)
	}
	f, err := sentry.NewForwarder(sentry.Options{DSN: dsn, Dir: filepath.Join(dir, "sentry"), Log: logf})
	if err != nil {
		return nil, err
	}
	logf("forwarding reports to Sentry at %s", dsn.Redacted())
	return f, nil
}
