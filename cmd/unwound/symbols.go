package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/unwound-dev/unwound/host/symstore"
)

// symbolsCmd is `unwound symbols add|serve`: the build-id symbol store.
func symbolsCmd(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New("symbols: add or serve")
	}
	switch args[0] {
	case "add":
		return symbolsAdd(args[1:], w)
	case "serve":
		return symbolsServe(args[1:])
	}
	return fmt.Errorf("symbols: unknown command %q (add, serve)", args[0])
}

// storeFlags are --store DIR and --dir DIR (a collector's directory, whose
// store is DIR/symbols). The function returns the store and the --dir
// given, if that is where it came from.
func storeFlags(fs *flag.FlagSet) func() (store, collector string) {
	store := fs.String("store", "", "symbol store `directory`")
	dir := fs.String("dir", "", "the collector's `directory`: its store is DIR/symbols")
	return func() (string, string) {
		if *store != "" {
			return *store, ""
		}
		if *dir != "" {
			return filepath.Join(*dir, "symbols"), *dir
		}
		return "", ""
	}
}

func symbolsAdd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("symbols add", flag.ContinueOnError)
	flags := storeFlags(fs)
	verbose := fs.Bool("v", false, "also list the files already in the store")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, _ := flags()
	if dir == "" || fs.NArg() == 0 {
		return errors.New("symbols add: --store DIR (or --dir DIR) and at least one PATH")
	}
	st, err := symstore.Open(dir)
	if err != nil {
		return fmt.Errorf("symbols add: %w", err)
	}
	res, err := st.Add(fs.Args())
	if res != nil {
		for _, l := range res.Layouts {
			fmt.Fprintf(w, "layout %s\n", l)
		}
		added, had := 0, 0
		for _, f := range res.Found {
			if f.New {
				added++
				fmt.Fprintf(w, "added   %s %-10s %s\n", f.BuildID, f.Kind, f.From)
			} else {
				had++
				if *verbose {
					fmt.Fprintf(w, "have    %s %-10s %s (duplicate)\n", f.BuildID, f.Kind, f.From)
				}
			}
		}
		for _, s := range res.Skipped {
			fmt.Fprintf(w, "skipped %s: %s\n", s.Path, s.Why)
		}
		fmt.Fprintf(w, "%d added, %d already in %s, %d skipped, %d files not ELF, %d object files without a build id\n", added, had, st.Dir, len(res.Skipped), res.NotELF, res.Objects)
	}
	if err != nil {
		return fmt.Errorf("symbols add: %w", err)
	}
	return nil
}

func symbolsServe(args []string) error {
	fs := flag.NewFlagSet("symbols serve", flag.ContinueOnError)
	flags := storeFlags(fs)
	listen := fs.String("listen", ":8002", "`address` to listen on (debuginfod's port by default)")
	token := fs.String("token", "", "require this bearer `token`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, _ := flags()
	if dir == "" {
		return errors.New("symbols serve: --store DIR (or --dir DIR)")
	}
	st, err := symstore.Open(dir)
	if err != nil {
		return fmt.Errorf("symbols serve: %w", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("symbols serve: %w", err)
	}
	fmt.Fprintf(os.Stderr, "unwound symbols: listening on http://%s (debuginfod), store %s\n", ln.Addr(), st.Dir)
	mux := http.NewServeMux()
	mux.Handle("/buildid/", st.Handler(*token))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("symbols serve: %w", err)
	}
	return nil
}
