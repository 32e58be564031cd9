// Command unwound is the host side of unwound: it decodes the reports that
// boards queue and upload. See README.md.
//
//	unwound decode [--format json|text] FILE...   (.json.zst or .json, - for stdin)
//	unwound receive --port DEV [--baud N] (--out DIR | --dir DIR | --collector URL) [--follow] [--count N] [--idle D]
//	unwound serve [--listen ADDR] --dir DIR [--out DIR] [--token T] [--read-token T] [--tls-cert F --tls-key F [--client-ca F]]
//	unwound crashes list|show|reports|resymbolize (--dir DIR | --url URL) ...
//	unwound extract [--out DIR] [FILE] < console.log
//	unwound symbolize [--debug-dir DIR]... [--store DIR] [--dir DIR] [--sysroot DIR] [--format text|json] FILE...
//	unwound symbols add [--store DIR | --dir DIR] [-v] PATH...
//	unwound symbols serve [--store DIR | --dir DIR] [--listen ADDR] [--token T]
//	unwound minidebuginfo --unstripped F --stripped G [-o OUT] [--symbols-only] [-v]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/internal/version"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// fleetCmds are the commands of the fleet collector (serve, crashes,
// sentry), registered by their files: the release tarball that Yocto and
// Buildroot build the host tools from leaves those files out, with the
// collector's pure-Go SQLite (docs/packaging.md, make dist).
var fleetCmds = map[string]func(args []string) error{}

// fleetOnly names them, for a clear error where they are left out.
var fleetOnly = map[string]bool{"serve": true, "crashes": true, "sentry": true}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "decode":
		err = decodeCmd(os.Args[2:])
	case "receive":
		err = receiveCmd(os.Args[2:])
	case "extract", "undump":
		err = extract(os.Args[2:])
	case "symbolize":
		err = symbolizeCmd(os.Args[2:], os.Stdout)
	case "symbols":
		err = symbolsCmd(os.Args[2:], os.Stdout)
	case "minidebuginfo":
		err = minidebuginfoCmd(os.Args[2:])
	case "version", "--version":
		fmt.Println("unwound", version.Version)
	case "help", "-h", "--help":
		usage()
	default:
		cmd, ok := fleetCmds[os.Args[1]]
		switch {
		case ok:
			err = cmd(os.Args[2:])
		case fleetOnly[os.Args[1]]:
			err = fmt.Errorf("%s: this unwound was built without the fleet collector (the release tarball carries the build-host tools only); build it from the git tree", os.Args[1])
		default:
			fmt.Fprintf(os.Stderr, "unwound: unknown command %q\n", os.Args[1])
			usage()
			os.Exit(2)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "unwound:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: unwound COMMAND [ARGS]

commands:
  decode [--format json|text] FILE...   validate and print reports (.json.zst, .json, - for stdin)
  receive --port DEV [--baud N] [--flow none|rtscts] [--follow] [--count N] [--idle D]
          [--out DIR] [--dir DIR | --collector URL [--token T]]
                                        pull reports over a serial line until the board's queue
                                        is empty (--follow: keep listening); reopens DEV if it goes away;
                                        files in --out, and/or into a collector (its --dir, or its URL)
  serve [--listen ADDR] --dir DIR [--out DIR] [--token T] [--read-token T] [--tls-cert F --tls-key F [--client-ca F]]
        [--debug-dir D]... [--sysroot D] [--keep-days N] [--max-bytes N]
                                        the fleet's collector: receive reports over HTTP(S) into
                                        DIR/unwound.db, symbolized and grouped; GET /reports lists
                                        them, /api/ serves the groups (docs/collector.md), / is the
                                        page for a browser (docs/collector-page.md)
  crashes list [--since T] [--release R] [--program P] [--device D] [--signal S] [--json]
  crashes show GROUP|REPORT [--json]
  crashes reports GROUP [--json]
  crashes resymbolize
                                        a collector's crashes, grouped, most boards first; every
                                        subcommand takes --dir DIR or --url URL [--token T]
  extract [--out DIR] [FILE] < LOG      recover 'unwound-uploader dump' reports from a console log;
                                        prints the =UNWOUND-ACK lines the board's dump --remove takes
  symbolize [--debug-dir DIR]... [--store DIR] [--dir DIR] [--sysroot DIR] [--format text|json] FILE...
                                        print reports with functions, files and lines
                                        (DEBUGINFOD_URLS: also ask these debuginfod servers)
  symbols add [--store DIR | --dir DIR] [-v] PATH...
                                        index debug files by build ID into a symbol store: Yocto
                                        build dirs, Buildroot output/, files, .debug pairs
  symbols serve [--store DIR | --dir DIR] [--listen ADDR] [--token T]
                                        serve a symbol store over debuginfod (/buildid/ID/debuginfo)
  minidebuginfo --unstripped F --stripped G [-o OUT] [--symbols-only] [-v]
                                        add MiniDebugInfo (.gnu_debugdata) to a stripped file: the
                                        symbols .dynsym lacks and the .debug_frame no loaded
                                        table covers (--symbols-only: as Yocto's)
  version                               print the version
`)
}

func decodeCmd(args []string) error {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	format := fs.String("format", "json", "output `format`: json or text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("decode: name at least one report file (or -)")
	}
	return eachReport(fs.Args(), func(_ int, r *report.Report) error {
		switch *format {
		case "json":
			b, err := r.MarshalIndent()
			if err == nil {
				_, err = os.Stdout.Write(append(b, '\n'))
			}
			return err
		case "text":
			return summary(os.Stdout, r)
		}
		return fmt.Errorf("decode: unknown format %q", *format)
	})
}

// eachReport calls fn with each named report file, in order. A file that
// cannot be read is logged and passed over, and counted in the error at
// the end; an error from fn stops at once.
func eachReport(names []string, fn func(i int, r *report.Report) error) error {
	failed := 0
	for i, name := range names {
		r, err := readReport(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "unwound:", err)
			failed++
			continue
		}
		if err := fn(i, r); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d reports could not be read", failed, len(names))
	}
	return nil
}

// summary prints a report the way a backtrace reads, without symbols:
// the symbolizer's printer, each frame at its module and file address.
func summary(w io.Writer, r *report.Report) error {
	return symbolize.WriteText(w, symbolize.Plain(r))
}

// readReport reads and decodes one report file, "-" being stdin.
func readReport(name string) (*report.Report, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, decode.MaxDecoded))
	} else {
		b, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, err
	}
	r, err := decode.Report(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func symbolizeCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("symbolize", flag.ContinueOnError)
	var dirs multiFlag
	fs.Var(&dirs, "debug-dir", "debug file `directory` (.build-id tree, <dir>/<path>.debug); repeatable; default SYSROOT/usr/lib/debug")
	sysroot := fs.String("sysroot", "/", "the target's root filesystem `dir`: report paths are looked up under it")
	format := fs.String("format", "text", "output `format`: text or json")
	flags := storeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("symbolize: name at least one report file (or -)")
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("symbolize: unknown format %q", *format)
	}
	if len(dirs) == 0 {
		d := filepath.Join(*sysroot, "usr", "lib", "debug")
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	if d, collector := flags(); d != "" {
		// A symbol store is a build-id tree: searched first. A
		// collector need not have one yet; a --store must exist.
		check := d
		if collector != "" {
			check = collector
		}
		if _, err := os.Stat(check); err != nil {
			return fmt.Errorf("symbolize: %w", err)
		}
		dirs = append(multiFlag{d}, dirs...)
	}
	if os.Getenv("GOGC") == "" {
		// A short-lived process whose heap is mostly section bytes:
		// fewer collections (a tenth of a cold run's CPU), well within
		// llvm-symbolizer's peak memory (BenchmarkColdProcess).
		debug.SetGCPercent(400)
	}
	// DEBUGINFOD_URLS, as gdb and elfutils read it: servers asked by
	// build ID when no debug file is found on disk.
	s := symbolize.New(symbolize.Options{DebugDirs: dirs, Sysroot: *sysroot, Debuginfod: symbolize.DebuginfodFromEnv(), IndexDir: symbolize.DefaultIndexDir()})
	defer s.Close()
	return eachReport(fs.Args(), func(i int, r *report.Report) error {
		res := s.Symbolize(r)
		if *format == "json" {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		return symbolize.WriteText(w, res)
	})
}
