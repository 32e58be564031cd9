package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/unwound-dev/unwound/host/receive"
	"github.com/unwound-dev/unwound/host/symstore"
)

// serve is an HTTP receiver: what unwound-uploader's HTTP transport posts to.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var o receive.ServeOptions
	fs.StringVar(&o.Listen, "listen", ":8080", "`address` to listen on")
	out := fs.String("dir", "", "`directory` for the reports (DIR/<id>.json.zst)")
	fs.StringVar(out, "out", "", "same as --dir")
	fs.StringVar(&o.Token, "token", "", "require this bearer `token`")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "serve HTTPS with this certificate (PEM)")
	fs.StringVar(&o.TLSKey, "tls-key", "", "and this key (PEM)")
	fs.StringVar(&o.ClientCA, "client-ca", "", "with --tls-cert: require a client certificate signed by a CA in this PEM `bundle` (mutual TLS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := receive.NewStore(*out)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	// The collector's symbol store, served over debuginfod beside it.
	syms, err := symstore.Open(filepath.Join(*out, "symbols"))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	o.Mount = map[string]http.Handler{"/buildid/": syms.Handler(o.Token)}
	o.Log = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "unwound serve: "+format+"\n", args...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := receive.Serve(ctx, st, o); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
