package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/unwound-dev/unwound/uploader/armor"
)

// undump turns `unwound-uploader dump` output (a console log) back into
// report files, checking every line's CRC and each report's sha256.
func undump(args []string) error {
	fs := flag.NewFlagSet("undump", flag.ContinueOnError)
	out := fs.String("out", ".", "`directory` for the reports (DIR/<id>.json.zst)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("undump: name one file (or - for stdin)")
	}
	var in io.Reader = os.Stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	st, err := newDirStore(*out)
	if err != nil {
		return fmt.Errorf("undump: %w", err)
	}
	blocks, err := armor.Read(in)
	if err != nil {
		return fmt.Errorf("undump: %w", err)
	}
	bad := 0
	for _, b := range blocks {
		if b.Err != nil {
			fmt.Fprintf(os.Stderr, "unwound undump: %v\n", b.Err)
			bad++
			continue
		}
		r, stored, invalid, err := st.put(b.Data, "")
		switch {
		case err != nil:
			return fmt.Errorf("undump: %w", err)
		case invalid != nil:
			fmt.Fprintf(os.Stderr, "unwound undump: %s: %v\n", b.Name, invalid)
			bad++
		case stored:
			fmt.Printf("%s\t%s\n", b.Name, st.path(r.ID))
		default:
			fmt.Printf("%s\t%s (already there)\n", b.Name, st.path(r.ID))
		}
	}
	if bad > 0 {
		return fmt.Errorf("undump: %d of %d reports damaged", bad, len(blocks))
	}
	if len(blocks) == 0 {
		return fmt.Errorf("undump: no report found")
	}
	return nil
}
