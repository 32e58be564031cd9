package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/unwound-dev/unwound/host/collector"
	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/host/symbolize"
	"github.com/unwound-dev/unwound/host/symstore"
	"github.com/unwound-dev/unwound/host/web"
	"github.com/unwound-dev/unwound/report"
)

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

func init() {
	fleetCmds["serve"] = serve
	collectorSinks = openCollectorSinks
}

// openCollectorSinks is where unwound receive hands reports to a collector:
// its directory, or a running one's URL.
func openCollectorSinks(cf *collectorFlags, dir, url, token string, logf func(string, ...any)) (receive.Sink, func() error, error) {
	if dir != "" {
		c, err := cf.open(dir, logf)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	}
	return &collector.Client{URL: url, Token: token}, func() error { return nil }, nil
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
	fs.IntVar(&o.Limits.MaxInFlight, "max-in-flight", 0, "uploads read, decoded and stored at once; others wait, then get 503 (default 8)")
	fwd := fs.String("forward-sentry", "", "forward each stored report to Sentry at this `DSN` (outbox in DIR/sentry)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" && *out == "" {
		return errors.New("serve: --dir DIR is required")
	}
	o.Log = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "unwound serve: "+format+"\n", args...)
	}
	fwdDir := *dir
	if fwdDir == "" {
		fwdDir = *out
	}
	fw, err := newSentryForwarder(*fwd, fwdDir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if fw != nil {
		defer fw.Close()
	}
	var sinks receive.Tee
	if *dir != "" {
		c, err := cf.open(*dir, o.Log)
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		defer c.Close()
		if fw != nil {
			c.OnStored = func(s collector.Stored) {
				// An unsymbolized signature changes once symbols
				// arrive: Sentry groups by its own rules until then.
				sig := ""
				if s.Signature.Symbolized {
					sig = s.Signature.Text
				}
				fw.Stored(s.ID, s.Raw, s.Report, s.Result, sig)
			}
		}
		c.Start()
		sinks = append(sinks, c)
		// The collector's symbol store, served over debuginfod beside it.
		syms, err := symstore.Open(filepath.Join(*dir, "symbols"))
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		o.Routes = map[string]http.Handler{"/api/": collector.API(c), "/buildid/": syms.Handler(o.Token)}
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
		if fw != nil && *dir == "" {
			st.OnStored = func(r *report.Report, data []byte) { fw.Stored(r.ID, data, r, nil, "") }
		}
		sinks = append(sinks, st)
	}
	sink := oneSink(sinks)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := receive.Serve(ctx, sink, o); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
