package view

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultAddr is where the view listens unless told otherwise: loopback
// only.
const DefaultAddr = "127.0.0.1:9465"

// CheckAccess reports whether a view may listen on addr with token: on
// a loopback address it may without one; anywhere else it needs one.
func CheckAccess(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("view: address %q: %w", addr, err)
	}
	if token != "" || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("view: %s is not a loopback address: set a bearer token (--token or BRAID_VIEW_TOKEN) to serve beyond this machine", addr)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler serves the pages and the JSON API of ix. With a token, every
// /api request must carry "Authorization: Bearer <token>" (the pages
// themselves hold no data; they send the token they were opened with). It
// is read-only: anything but GET and HEAD gets 405.
func Handler(ix *Index, token string, assets fs.FS, log *slog.Logger, opts ...Option) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &handler{ix: ix, token: token, log: log}
	for _, o := range opts {
		o(h)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/status", h.api(func(r *http.Request) (any, error) { return ix.Status(), nil }))
	mux.HandleFunc("GET /api/overview", h.api(func(r *http.Request) (any, error) {
		q, err := h.query(r)
		if err != nil {
			return nil, err
		}
		return ix.Overview(q), nil
	}))
	mux.HandleFunc("GET /api/explain", h.api(func(r *http.Request) (any, error) {
		q, err := h.query(r)
		if err != nil {
			return nil, err
		}
		if !q.hasSelection() {
			return nil, fmt.Errorf("%w: explain needs metric, lo and hi", errBadQuery)
		}
		return ix.Explain(q), nil
	}))
	mux.HandleFunc("GET /api/traces", h.api(func(r *http.Request) (any, error) {
		q, err := h.query(r)
		if err != nil {
			return nil, err
		}
		return ix.Traces(q), nil
	}))
	mux.HandleFunc("GET /api/layers", h.api(func(r *http.Request) (any, error) {
		q, err := h.query(r)
		if err != nil {
			return nil, err
		}
		return ix.Layers(q)
	}))
	mux.HandleFunc("GET /api/incidents", h.api(func(r *http.Request) (any, error) {
		q, err := h.query(r)
		if err != nil {
			return nil, err
		}
		if r.URL.Query().Get("from") == "" {
			q.From = time.Unix(0, 0)
		}
		return ix.Incidents(q.From, q.To), nil
	}))
	mux.HandleFunc("GET /api/incident/{id}", h.api(func(r *http.Request) (any, error) { return ix.IncidentPage(r.PathValue("id")) }))
	mux.HandleFunc("GET /api/trace/{id}", h.api(func(r *http.Request) (any, error) { return ix.TracePage(strings.ToLower(r.PathValue("id"))) }))
	mux.HandleFunc("GET /api/alerts", h.api(func(r *http.Request) (any, error) { return ix.Alerts(r.URL.Query().Get("firing") == "1"), nil }))
	mux.HandleFunc("GET /api/alert/{key...}", h.api(func(r *http.Request) (any, error) {
		p := ix.Alert(r.PathValue("key"))
		if len(p.Episodes) == 0 {
			return nil, errNotFound
		}
		return p, nil
	}))
	if h.report != nil {
		mux.HandleFunc("GET /api/report/{id}", h.serveReport)
	}
	mux.HandleFunc("GET /api/", h.api(func(r *http.Request) (any, error) { return nil, errNotFound }))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	if assets != nil {
		files := http.StripPrefix("/assets/", http.FileServerFS(assets))
		mux.Handle("GET /assets/", noDirs(cacheVersioned(files)))
		index, err := fs.ReadFile(assets, "index.html")
		if err != nil {
			index = []byte("<!doctype html><title>braid view</title><p>The view's pages are missing from this build.")
		}
		index = versionAssets(index, assets)
		mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Write(index)
		})
	}
	return readOnly(securityHeaders(mux))
}

type handler struct {
	ix     *Index
	token  string
	log    *slog.Logger
	report Reporter
}

// ErrNotFound is what a query or a Reporter returns for something the
// index does not hold.
var ErrNotFound = errNotFound

// Reporter renders the attribution report of an incident in a format
// ("html", "md" or "json"): the body and its content type.
type Reporter func(ctx context.Context, id, format string) (body []byte, contentType string, err error)

// Option configures Handler and Serve.
type Option func(*handler)

// WithReporter serves GET /api/report/{id}?format=html|md|json with r.
func WithReporter(r Reporter) Option { return func(h *handler) { h.report = r } }

// authorized checks the bearer token; on failure it writes 401.
func (h *handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h.token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) == 1 {
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("WWW-Authenticate", `Bearer realm="braid view"`)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a bearer token is required (open the view with ?token=…)"})
	return false
}

func (h *handler) serveReport(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !h.authorized(w, r) {
		return
	}
	format := cmp.Or(r.URL.Query().Get("format"), "html")
	if format != "html" && format != "md" && format != "json" {
		w.Header().Set("Content-Type", "application/json")
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "format: want html, md or json"})
		return
	}
	id := r.PathValue("id")
	body, ctype, err := h.report(r.Context(), id, format)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		code := http.StatusInternalServerError
		if errors.Is(err, errNotFound) {
			code = http.StatusNotFound
		} else {
			h.log.Warn("view: report failed", "incident", id, "err", err)
		}
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	w.Header().Set("Content-Type", ctype)
	if format == "md" {
		w.Header().Set("Content-Disposition", `attachment; filename="`+url.PathEscape(id)+`.md"`)
	}
	w.Write(body)
}

// api wraps a JSON endpoint: the token check, encoding, and errors as
// {"error": …} with 400, 404 or 500.
func (h *handler) api(f func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !h.authorized(w, r) {
			return
		}
		v, err := f(r)
		switch {
		case err == nil:
			writeJSON(w, http.StatusOK, v)
		case errors.Is(err, errBadQuery):
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		case errors.Is(err, errNotFound):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		default:
			h.log.Warn("view: query failed", "path", r.URL.Path, "err", err)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.WriteHeader(code)
	w.Write(b)
}

// query reads a Query from the request's parameters.
func (h *handler) query(r *http.Request) (Query, error) {
	v := r.URL.Query()
	var q Query
	bad := func(name string, err error) (Query, error) {
		return Query{}, fmt.Errorf("%w: %s=%q: %v", errBadQuery, name, v.Get(name), err)
	}
	ms := func(name string) (time.Time, bool, error) {
		s := v.Get(name)
		if s == "" {
			return time.Time{}, false, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, false, errors.New("want unix milliseconds")
		}
		return time.UnixMilli(n), true, nil
	}
	dur := func(name string) (time.Duration, error) {
		s := v.Get(name)
		if s == "" {
			return 0, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f > 1e12 {
			return 0, errors.New("want milliseconds, at least 0")
		}
		return time.Duration(f * 1e6), nil
	}
	q.Incident = v.Get("incident")
	defFrom, defTo := h.ix.DefaultRange(15 * time.Minute)
	if q.Incident != "" && v.Get("from") == "" {
		if inc, err := h.ix.incident(q.Incident); err == nil && inc != nil && inc.FirstUnixNano > 0 {
			defFrom = time.Unix(0, int64(inc.FirstUnixNano)).Add(-time.Minute)
			defTo = time.Unix(0, int64(max(inc.LastUnixNano, inc.FirstUnixNano))).Add(time.Minute)
		}
	}
	var ok bool
	var err error
	if q.From, ok, err = ms("from"); err != nil {
		return bad("from", err)
	} else if !ok {
		q.From = defFrom
	}
	if q.To, ok, err = ms("to"); err != nil {
		return bad("to", err)
	} else if !ok {
		q.To = defTo
	}
	if !q.To.After(q.From) {
		return Query{}, fmt.Errorf("%w: to must be after from", errBadQuery)
	}
	q.Filters = map[string]string{}
	for _, d := range dimensions {
		if s, ok := v[d]; ok && len(s) > 0 {
			q.Filters[d] = s[0]
		}
	}
	if m := v.Get("metric"); m != "" {
		if !slices.Contains([]string{"ttft", "e2e", "tpot"}, m) {
			return bad("metric", errors.New("want ttft, e2e or tpot"))
		}
		q.Metric = m
		if q.Lo, err = dur("lo"); err != nil {
			return bad("lo", err)
		}
		if q.Hi, err = dur("hi"); err != nil {
			return bad("hi", err)
		}
		if v.Get("hi") == "" {
			q.Hi = 1e6 * time.Second
		}
		if q.SelFrom, ok, err = ms("sel_from"); err != nil {
			return bad("sel_from", err)
		} else if !ok {
			q.SelFrom = q.From
		}
		if q.SelTo, ok, err = ms("sel_to"); err != nil {
			return bad("sel_to", err)
		} else if !ok {
			q.SelTo = q.To
		}
	}
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil {
			return bad("limit", err)
		}
	}
	return q, nil
}

// readOnly answers 405 to anything but GET and HEAD.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "braid view is read-only", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// securityHeaders: everything the pages load comes from braid itself.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// versionAssets appends ?v=<content hash> to each /assets/ URL that the
// page names in a src or href attribute, so that browsers may keep them
// (cacheVersioned) and still load a new build's at once.
func versionAssets(page []byte, assets fs.FS) []byte {
	return assetRef.ReplaceAllFunc(page, func(m []byte) []byte {
		sub := assetRef.FindSubmatch(m)
		b, err := fs.ReadFile(assets, string(sub[2]))
		if err != nil {
			return m
		}
		sum := sha256.Sum256(b)
		return fmt.Appendf(nil, `%s"/assets/%s?v=%x"`, sub[1], sub[2], sum[:6])
	})
}

var assetRef = regexp.MustCompile(`((?:src|href)=)"/assets/([A-Za-z0-9_./-]+)"`)

// cacheVersioned lets browsers keep an asset requested with ?v= (its
// content hash, versionAssets) for a year without asking again; others
// they revalidate.
func cacheVersioned(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("v") != "" {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		next.ServeHTTP(w, r)
	})
}

// noDirs refuses directory listings of the assets.
func noDirs(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Serve serves Handler on addr until ctx ends. ready, when not nil, gets
// the listening address once it listens.
func Serve(ctx context.Context, ix *Index, addr, token string, assets fs.FS, log *slog.Logger, ready func(string), opts ...Option) error {
	if err := CheckAccess(addr, token); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("view: listen: %w", err)
	}
	srv := &http.Server{Handler: Handler(ix, token, assets, log, opts...), ReadHeaderTimeout: 10 * time.Second}
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		return nil
	}
}

// URL is the view's address for a browser.
func URL(addr string) string {
	return (&url.URL{Scheme: "http", Host: addr, Path: "/"}).String()
}
