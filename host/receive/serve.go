package receive

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/report/decode"
)

// ServeOptions configure the HTTP receiver.
type ServeOptions struct {
	Listen  string // address to listen on
	Token   string // bearer token required, when set
	TLSCert string // serve HTTPS with this certificate (PEM)...
	TLSKey  string // ...and this key
	// ClientCA, with TLSCert, requires a client certificate signed by a
	// CA in this PEM bundle (mutual TLS).
	ClientCA string
	Limits   Limits // what uploads may cost (LimitUploads)
	Log      func(format string, args ...any)
	// Routes are more handlers, by path prefix ("/api/"), behind the
	// same token and TLS; every other path is Handler's.
	Routes map[string]http.Handler
	// ReadToken, when set, also lets GET and HEAD requests to Routes
	// through, never a report in: a token for people and dashboards.
	ReadToken string
	// Pages are handlers by ServeMux pattern ("GET /{$}") behind TLS but
	// not the token: they check access themselves (the web page's login).
	Pages map[string]http.Handler
}

// handler is Handler with the Routes beside it.
func (o ServeOptions) handler(st Sink) http.Handler {
	h := Handler(st, o.Token, o.Log)
	if len(o.Routes) == 0 && len(o.Pages) == 0 {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	for prefix, r := range o.Routes {
		mux.Handle(prefix, guardRoute(o.Token, o.ReadToken, r))
	}
	for pattern, p := range o.Pages {
		mux.Handle(pattern, p)
	}
	return mux
}

// guardRoute lets through requests with the token and, when a read
// token is set, GET and HEAD requests with it. With neither token set,
// everything goes through, as with Guard.
func guardRoute(token, readToken string, h http.Handler) http.Handler {
	if readToken == "" {
		return Guard(token, h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		if !(token != "" && authorized(r, token)) && !(read && authorized(r, readToken)) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "bad or missing bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Guard lets through only requests with the bearer token (any, when token
// is empty).
func Guard(token string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, token) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "bad or missing bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func authorized(r *http.Request, token string) bool {
	if token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// Serve is an HTTP receiver, what unwound-uploader's HTTP transport posts
// to, until ctx ends.
func Serve(ctx context.Context, st Sink, o ServeOptions) error {
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if o.ClientCA != "" && o.TLSCert == "" {
		return errors.New("--client-ca needs --tls-cert and --tls-key")
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           LimitUploads(o.handler(st), o.Limits, o.Log),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
	}
	if o.ClientCA != "" {
		pem, err := os.ReadFile(o.ClientCA)
		if err != nil {
			return fmt.Errorf("--client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--client-ca %s: no PEM certificate", o.ClientCA)
		}
		srv.TLSConfig = &tls.Config{ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	scheme := "http"
	if o.TLSCert != "" {
		scheme = "https"
	}
	o.Log("listening on %s://%s, storing into %s", scheme, ln.Addr(), st)
	if o.TLSCert != "" {
		err = srv.ServeTLS(ln, o.TLSCert, o.TLSKey)
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler takes POSTed reports (at any path but /reports): 201
// stored, 200 duplicate (the uploader deletes its entry either way), 400
// invalid (the uploader quarantines it), 401 bad token, 413 too large, 415
// unknown encoding, 507 disk full and 503 another local error (the
// uploader keeps the report and retries). GET /reports lists the stored
// reports as JSON. The token, when set, guards both.
func Handler(st Sink, token string, logf func(string, ...any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, token) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "bad or missing bearer token", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/reports" {
			list, err := st.List()
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
		body, err := ReadBody(w, r, decode.MaxDecoded)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				logf("refused a report from %s: body larger than %d bytes", r.RemoteAddr, mbe.Limit)
				http.Error(w, "report too large", http.StatusRequestEntityTooLarge)
				return
			}
			logf("reading a report from %s: %v", r.RemoteAddr, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		want := r.Header.Get("X-Unwound-Report-Id")
		if want != "" && !ValidID(want) {
			http.Error(w, "X-Unwound-Report-Id: want 32 hex digits", http.StatusBadRequest)
			return
		}
		rep, stored, invalid, err := st.Put(body, want)
		switch {
		case err != nil && DiskFull(err):
			logf("storing a report from %s: %v: answered 507, the uploader keeps it", r.RemoteAddr, err)
			http.Error(w, "collector disk full, retry later", http.StatusInsufficientStorage)
			return
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
