package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/unwound-dev/unwound/uploader/armor"
)

// extract turns `unwound-uploader dump` output captured from a console
// back into report files, checking every line's CRC and each report's
// sha256. For every report it has on disk it prints the board's
// confirmation (=UNWOUND-ACK) on stdout: fed to `unwound-uploader dump
// --remove` on the board, it deletes those entries there.
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
	st, err := newDirStore(*out)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	blocks, err := armor.Read(in)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	bad := 0
	for _, b := range blocks {
		if b.Err != nil {
			fmt.Fprintf(os.Stderr, "unwound extract: %v\n", b.Err)
			bad++
			continue
		}
		r, stored, invalid, err := st.put(b.Data, "")
		switch {
		case err != nil:
			return fmt.Errorf("extract: %w", err)
		case invalid != nil:
			fmt.Fprintf(os.Stderr, "unwound extract: %s: %v\n", b.Name, invalid)
			bad++
			continue
		case stored:
			fmt.Fprintf(os.Stderr, "unwound extract: %s: stored %s\n", b.Name, st.path(r.ID))
		default:
			fmt.Fprintf(os.Stderr, "unwound extract: %s: already there (%s)\n", b.Name, st.path(r.ID))
		}
		fmt.Println(armor.Ack(b.Name, b.Data))
	}
	if bad > 0 {
		return fmt.Errorf("extract: %d of %d reports damaged", bad, len(blocks))
	}
	if len(blocks) == 0 {
		return fmt.Errorf("extract: no report found")
	}
	return nil
}
