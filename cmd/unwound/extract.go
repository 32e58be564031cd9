package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/unwound-dev/unwound/host/receive"
)

// extract recovers `unwound-uploader dump` reports from a console log
// (receive.Extract), printing the board's confirmations on stdout.
func extract(args []string) error {
	fs := flag.NewFlagSet("extract", flag.ContinueOnError)
	out := fs.String("out", ".", "`directory` for the reports (DIR/<id>.json.zst)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return fmt.Errorf("extract: name one console log (default: stdin)")
	}
	var in io.Reader = os.Stdin
	if name := fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	st, err := receive.NewStore(*out)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "unwound extract: "+format+"\n", args...)
	}
	if err := receive.Extract(in, st, os.Stdout, logf); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	return nil
}
