package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/unwound-dev/unwound/report/decode"
)

// serve is an HTTP receiver: what unwound-uploader's HTTP transport posts to.
func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "`address` to listen on")
	out := fs.String("dir", "", "`directory` for the reports (DIR/<id>.json.zst)")
	fs.StringVar(out, "out", "", "same as --dir")
	token := fs.String("token", "", "require this bearer `token`")
	cert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM)")
	key := fs.String("tls-key", "", "and this key (PEM)")
	clientCA := fs.String("client-ca", "", "with --tls-cert: require a client certificate signed by a CA in this PEM `bundle` (mutual TLS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*cert == "") != (*key == "") {
		return errors.New("serve: --tls-cert and --tls-key go together")
	}
	if *clientCA != "" && *cert == "" {
		return errors.New("serve: --client-ca needs --tls-cert and --tls-key")
	}
	st, err := newDirStore(*out)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "unwound serve: "+format+"\n", args...)
	}
	srv := &http.Server{
		Handler:           reportHandler(st, *token, logf),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
	}
	if *clientCA != "" {
		pem, err := os.ReadFile(*clientCA)
		if err != nil {
			return fmt.Errorf("serve: --client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("serve: --client-ca %s: no PEM certificate", *clientCA)
		}
		srv.TLSConfig = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	scheme := "http"
	if *cert != "" {
		scheme = "https"
	}
	logf("listening on %s://%s, storing into %s", scheme, ln.Addr(), *out)
	if *cert != "" {
		err = srv.ServeTLS(ln, *cert, *key)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// reportHandler takes POSTed reports (at any path but /reports): 201
// stored, 200 duplicate (the uploader deletes its entry either way), 400
// invalid (the uploader quarantines it), 401 bad token, 413 too large, 415
// unknown encoding. GET /reports lists the stored reports as JSON. The
// token, when set, guards both.
func reportHandler(st *dirStore, token string, logf func(string, ...any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "bad or missing bearer token", http.StatusUnauthorized)
				return
			}
		}
		if r.Method == http.MethodGet && r.URL.Path == "/reports" {
			list, err := st.list()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(list)
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "POST reports here, GET /reports lists them", http.StatusMethodNotAllowed)
			return
		}
		switch ce := r.Header.Get("Content-Encoding"); ce {
		case "", "identity", "zstd":
		default:
			http.Error(w, "Content-Encoding "+ce+": want zstd", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, decode.MaxDecoded))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, "report too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		want := r.Header.Get("X-Unwound-Report-Id")
		if want != "" && !validID(want) {
			http.Error(w, "X-Unwound-Report-Id: want 32 hex digits", http.StatusBadRequest)
			return
		}
		rep, stored, invalid, err := st.put(body, want)
		switch {
		case err != nil:
			logf("storing: %v", err)
			http.Error(w, "cannot store the report", http.StatusServiceUnavailable)
			return
		case invalid != nil:
			logf("rejected a report from %s: %v", r.RemoteAddr, invalid)
			http.Error(w, invalid.Error(), http.StatusBadRequest)
			return
		}
		status, code := "duplicate", http.StatusOK
		if stored {
			status, code = "stored", http.StatusCreated
		}
		logf("report %s from device %q: %s", rep.ID, r.Header.Get("X-Unwound-Device-Id"), status)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]string{"id": rep.ID, "status": status})
	})
}
