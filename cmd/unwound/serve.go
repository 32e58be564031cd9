package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/host/web"
)

// collectorFlags are the flags of commands that open a collector
// directory: where symbols are, retention, signature rules.
type collectorFlags struct {
	dirs     multiFlag
	sysroot  string
	keepDays int
	maxBytes int64
}

func (cf *collectorFlags) register(fs *flag.FlagSet, retention bool) {
	fs.Var(&cf.dirs, "debug-dir", "debug file `directory` (.build-id tree, <dir>/<path>.debug), searched after DIR/symbols; repeatable")
	fs.StringVar(&cf.sysroot, "sysroot", "", "the target's root filesystem `dir`: report paths are looked up under it (default DIR/sysroot)")
	if retention {
		fs.IntVar(&cf.keepDays, "keep-days", 0, "prune reports received more than `N` days ago (0: keep them); groups keep their counts")
		fs.Int64Var(&cf.maxBytes, "max-bytes", 0, "prune the oldest reports while the kept reports exceed `N` bytes (0: no bound)")
	}
}

// open opens the collector in dir with these flags; DEBUGINFOD_URLS is
// read as unwound symbolize reads it, the signature rules from
// DIR/signature.toml.
func (cf *collectorFlags) open(dir string, logf func(string, ...any)) (*collector.Collector, error) {
	o := collector.Options{
		DebugDirs: cf.dirs, Sysroot: cf.sysroot, Debuginfod: symbolize.DebuginfodFromEnv(),
		KeepDays: cf.keepDays, MaxBytes: cf.maxBytes, Log: logf,
	}
	return collector.Open(dir, o)
}

// serve is an HTTP receiver: what unwound-uploader's HTTP transport posts
// to. With --dir it is the fleet's collector: every report goes into the
// database DIR/unwound.db, symbolized and grouped, and /api/ serves the
// groups (unwound crashes --url) and / the page (host/web).
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var o receive.ServeOptions
	var cf collectorFlags
	fs.StringVar(&o.Listen, "listen", ":8080", "`address` to listen on")
	dir := fs.String("dir", "", "collector `directory`: the database DIR/unwound.db, symbols in DIR/symbols")
	out := fs.String("out", "", "also keep each report as a file in this `directory` (DIR/<id>.json.zst)")
	fs.StringVar(&o.Token, "token", "", "require this bearer `token`")
	fs.StringVar(&o.ReadToken, "read-token", "", "a second `token` that reads (the page, GET /api/) but posts no report")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	fs.StringVar(&o.TLSKey, "tls-key", "", "and this key (PEM)")
	fs.StringVar(&o.ClientCA, "client-ca", "", "with --tls-cert: require a client certificate signed by a CA in this PEM `bundle` (mutual TLS)")
	cf.register(fs, true)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" && *out == "" {
		return errors.New("serve: --dir DIR is required")
	}
	o.Log = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "unwound serve: "+format+"\n", args...)
	}
	var sinks receive.Tee
	if *dir != "" {
		c, err := cf.open(*dir, o.Log)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer c.Close()
		c.Start()
		sinks = append(sinks, c)
		o.Routes = map[string]http.Handler{"/api/": collector.API(c)}
		page, err := web.New(c, web.Options{Tokens: []string{o.Token, o.ReadToken}, Log: o.Log})
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		o.Pages = page.Routes()
	}
	if *out != "" {
		st, err := receive.NewStore(*out)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		sinks = append(sinks, st)
	}
	var sink receive.Sink = sinks
	if len(sinks) == 1 {
		sink = sinks[0]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := receive.Serve(ctx, sink, o); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
