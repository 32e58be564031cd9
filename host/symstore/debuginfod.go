package symstore

import (
	"crypto/subtle"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Handler serves the store with the debuginfod protocol (elfutils'
// debuginfod(8), "WEBAPI"): GET or HEAD /buildid/HEX/debuginfo and
// /buildid/HEX/executable answer the file with its Content-Length (and
// ranges); anything else under /buildid/ (source, section, unknown IDs)
// is 404. When token is set, requests must carry "Authorization: Bearer
// TOKEN" (debuginfod clients send it from DEBUGINFOD_HEADERS_FILE).
func (s *Store) Handler(token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if len(parts) != 3 || parts[0] != "buildid" || parts[2] != DebugInfo && parts[2] != Executable {
			http.NotFound(w, r)
			return
		}
		id := strings.ToLower(parts[1])
		p := s.Lookup(id, parts[2])
		if p == "" && parts[2] == Executable {
			// An unstripped binary stored as the debug file is the
			// executable too.
			p = s.Lookup(id, DebugInfo)
			if p != "" && !hasCode(p) {
				p = ""
			}
		}
		if p == "" {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(p)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Debuginfod-Size", strconv.FormatInt(st.Size(), 10))
		http.ServeContent(w, r, "", st.ModTime(), f)
	})
}

func hasCode(p string) bool {
	fi, err := inspect(p)
	return err == nil && fi.HasCode
}
