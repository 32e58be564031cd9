package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/unwound-dev/unwound/host/minidebuginfo"
)

// minidebuginfoCmd adds MiniDebugInfo to a stripped file
// (docs/minidebuginfo.md).
func minidebuginfoCmd(args []string) error {
	fs := flag.NewFlagSet("minidebuginfo", flag.ContinueOnError)
	var o minidebuginfo.Options
	fs.StringVar(&o.Unstripped, "unstripped", "", "the unstripped `file` (or its --only-keep-debug file)")
	fs.StringVar(&o.Stripped, "stripped", "", "the stripped `file` that ships")
	fs.StringVar(&o.Out, "o", "", "write the result to `file` (default: the stripped file, in place)")
	fs.BoolVar(&o.SymbolsOnly, "symbols-only", false, "symbols only, no .debug_frame (Yocto's MiniDebugInfo)")
	fs.BoolVar(&o.Go, "go", false, "also for Go programs (left alone by default)")
	fs.StringVar(&o.Objcopy, "objcopy", "", "objcopy `program` (default $OBJCOPY, else objcopy)")
	fs.StringVar(&o.XZ, "xz", "", "xz `program` (default xz)")
	verbose := fs.Bool("v", false, "print what was added")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Unstripped == "" || o.Stripped == "" || fs.NArg() > 0 {
		return fmt.Errorf("minidebuginfo: usage: unwound minidebuginfo --unstripped F --stripped G [-o OUT] [--symbols-only]")
	}
	st, err := minidebuginfo.Make(o)
	if errors.Is(err, minidebuginfo.ErrNotApplicable) {
		if *verbose {
			fmt.Fprintln(os.Stderr, "unwound: minidebuginfo:", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("minidebuginfo: %w", err)
	}
	if *verbose {
		fmt.Fprintf(os.Stderr, "%s: %d symbols, %d of %d FDEs, %d bytes inner, %d compressed, %d -> %d bytes\n",
			o.Stripped, st.Symbols, st.FDEsKept, st.FDEs, st.Inner, st.Compressed, st.StrippedSize, st.After)
	}
	return nil
}
