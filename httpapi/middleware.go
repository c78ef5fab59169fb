package httpapi

import (
	"context"
	"crypto/subtle"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/internal/base/authguard"
)

// reqInfo carries what the router learns about a request back out to
// instrument, which runs outside the router.
type reqInfo struct {
	route string // route template, the metrics label
}

type reqInfoKey struct{}

// unmatched labels requests no route matched (404 and 405), so unknown
// paths cannot blow up the metrics' label cardinality.
const unmatched = "unmatched"

// instrument wraps every request: it recovers panics into a 500, counts and
// times the request by route template and status, and logs it at Debug.
func (s *Server) instrument(w http.ResponseWriter, r *http.Request, next http.Handler) {
	start := time.Now()
	info := &reqInfo{route: unmatched}
	sw := &statusWriter{ResponseWriter: w}
	r = r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info))
	s.metrics.inFlight.Inc()
	defer func() {
		p := recover()
		aborted := p == http.ErrAbortHandler // net/http's own sentinel, compared as net/http does
		if p != nil && !aborted {
			s.recovered(sw, r, p)
		}
		s.metrics.inFlight.Dec()
		status := sw.statusCode()
		if aborted {
			status = 499 // the client saw a broken response
		}
		if f := sw.encodeErr; f != nil {
			s.log.Error("response encoding failed", "id", f.id, "method", r.Method, "path", r.URL.EscapedPath(),
				"route", info.route, "type", f.what, "status", f.status, "error", f.err)
		}
		elapsed := time.Since(start)
		s.metrics.observe(info.route, r.Method, status, elapsed)
		if s.log.IsDebug() {
			s.log.Debug("request", "method", r.Method, "path", r.URL.EscapedPath(), "route", info.route,
				"status", status, "bytes", sw.bytes, "duration", elapsed)
		}
		if aborted {
			panic(p) // net/http then drops the connection quietly
		}
	}()
	next.ServeHTTP(sw, r)
}

// recovered answers a panicking handler with a 500, if the response has not
// started, and logs the panic with its stack under an id the client sees.
func (s *Server) recovered(w *statusWriter, r *http.Request, p any) {
	id := uuid.NewString()
	s.log.Error("handler panicked", "id", id, "method", r.Method, "path", r.URL.EscapedPath(),
		"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	if w.wroteHeader {
		return // too late for a clean error; the client gets a truncated body
	}
	writeJSON(w, http.StatusInternalServerError, api.Error{
		Error: fmt.Sprintf("internal error (id %s)", id), Code: frontdoor.CodeInternal,
	})
}

// routeLabel is router middleware: it records the matched route's template
// for instrument. Templates are cleaned of their patterns once per route.
func (s *Server) routeLabel(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info, ok := r.Context().Value(reqInfoKey{}).(*reqInfo); ok {
			info.route = s.metrics.label(mux.CurrentRoute(r))
		}
		next.ServeHTTP(w, r)
	})
}

// varPattern matches "{name:pattern}" in a route template.
var varPattern = regexp.MustCompile(`\{([^}:]+):[^}]*\}`)

// labels caches cleaned route templates.
type labels struct {
	m sync.Map // *mux.Route -> string
}

func (l *labels) label(rt *mux.Route) string {
	if rt == nil {
		return unmatched
	}
	if v, ok := l.m.Load(rt); ok {
		return v.(string)
	}
	tpl, err := rt.GetPathTemplate()
	if err != nil {
		tpl = "other" // a route without a path (host or header matchers only)
	}
	tpl = varPattern.ReplaceAllString(tpl, "{$1}")
	l.m.Store(rt, tpl)
	return tpl
}

// methodNotAllowed answers a known path with an unsupported method.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) error {
	allow := s.allowedMethods(r)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	return newError(http.StatusMethodNotAllowed, frontdoor.CodeMethodNotAllowed,
		"method %s is not allowed here; allowed: %s", r.Method, strings.Join(allow, ", "))
}

// Tokens: each role's setting may hold several tokens separated by
// spaces (a token has none), every one valid, so a token is rotated
// without a failed request: add the new one, move the clients, remove
// the old one. A higher role's tokens open the lower roles' routes:
// admin > write > read. Tokens are never logged or echoed: errors say
// which role was wanted, not what was sent.

// tokens splits a role's setting into its tokens.
func tokens(setting string) [][]byte {
	var out [][]byte
	for _, t := range strings.Fields(setting) {
		out = append(out, []byte(t))
	}
	return out
}

// SetTokens replaces the tokens of each role (a reload). Requests
// already past the check are not affected.
func (s *Server) SetTokens(read, write, admin string) {
	s.auth.Store(&authTokens{read: tokens(read), write: tokens(write), admin: tokens(admin)})
}

// RequireWrite guards a write route: if write tokens are set, the request
// must carry one of them (or an admin token) as a bearer token. The read
// guard (requireRead) lets a write route through to this one.
func (s *Server) RequireWrite(h http.Handler) http.Handler {
	return &guard{s: s, next: h, passRead: true, check: s.tokenCheck("write", func(a *authTokens) [][][]byte {
		if len(a.write) == 0 {
			return nil
		}
		return [][][]byte{a.write, a.admin}
	})}
}

// Public marks a route that never needs a token: the probes and the
// metrics, which hold no user data. Every other route not guarded by
// RequireWrite needs the read token when one is set.
func (s *Server) Public(h http.Handler) http.Handler { return &guard{s: s, next: h, passRead: true} }

// guard is a route's handler behind its role's check. The check runs
// where the request arrived, which hands only typed operations to other
// replicas: a client's token never leaves the replica it reached.
type guard struct {
	s    *Server
	next http.Handler
	// check is the route's own role check; nil for a public route.
	check func(*http.Request) error
	// passRead: the read guard lets the route through (a write route,
	// whose own check decides, or a public one). The read guard finds
	// the guard as the matched route's handler, so a route is
	// read-guarded unless it is registered as one of these: a new route
	// is closed by default.
	passRead bool
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.check != nil {
		if err := g.check(r); err != nil {
			g.s.writeError(w, r, err)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// routeGuard is the guard of r's route, nil if it has none.
func routeGuard(r *http.Request) *guard {
	if rt := mux.CurrentRoute(r); rt != nil {
		g, _ := rt.GetHandler().(*guard)
		return g
	}
	return nil
}

// RequireAdmin guards an admin route: if admin tokens are set, the
// request must carry one of them as a bearer token. Without admin tokens
// the route is open only on a listener that reaches this host alone, or
// where the operator opted in (Edge.OpenAdmin); on a public listener it
// is closed to everyone, so a replica whose configuration check was
// bypassed still lets no stranger block users or move budgets.
func (s *Server) RequireAdmin(h http.Handler) http.Handler {
	check := s.tokenCheck("admin", func(a *authTokens) [][][]byte {
		if len(a.admin) == 0 {
			return nil
		}
		return [][][]byte{a.admin}
	})
	return &guard{s: s, next: h, check: func(r *http.Request) error {
		if len(s.auth.Load().admin) == 0 && s.cfg.Edge.Public && !s.cfg.Edge.OpenAdmin {
			return newError(http.StatusUnauthorized, frontdoor.CodeUnauthorized,
				"admin routes are closed: this replica listens beyond loopback and has no admin token")
		}
		return check(r)
	}}
}

// adminCaller reports whether r may see what only an operator should:
// it carries an admin token, or no admin token is set and the listener
// reaches this host alone (every caller is then a local operator).
func (s *Server) adminCaller(r *http.Request) bool {
	a := s.auth.Load()
	if len(a.admin) == 0 {
		return !s.cfg.Edge.Public
	}
	got, ok := bearer(r)
	return ok && matchToken(got, a.admin)
}

// requireRead guards every route, whatever its method, if read tokens
// are set: a read, write or admin token opens it. Only the routes
// registered through RequireWrite (guarded by the write token instead)
// or Public (the probes and /metrics) are let through, and requests
// another replica forwarded (checked where they arrived). It used to
// guard the GETs under /v1/ only, which left reads by another method
// (POST /v1/feed) open.
func (s *Server) requireRead(h http.Handler) http.Handler {
	check := s.tokenCheck("read", func(a *authTokens) [][][]byte {
		if len(a.read) == 0 {
			return nil
		}
		return [][][]byte{a.read, a.write, a.admin}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g := routeGuard(r); g == nil || !g.passRead {
			if err := check(r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// tokenCheck passes a request if sets, given the tokens in force, is nil
// (the role is open) or one of its tokens is the request's bearer token.
func (s *Server) tokenCheck(kind string, sets func(*authTokens) [][][]byte) func(*http.Request) error {
	return func(r *http.Request) error {
		want := sets(s.auth.Load())
		if want == nil {
			return nil
		}
		got, ok := bearer(r)
		if !ok {
			return newError(http.StatusUnauthorized, frontdoor.CodeUnauthorized,
				"this route needs the %s token as 'Authorization: Bearer <token>'", kind)
		}
		addr := s.clientAddr(r)
		if err := s.guardWait(r, addr); err != nil {
			return err
		}
		if matchToken(got, want...) {
			return nil
		}
		s.cfg.AuthGuard.Fail(addr)
		s.metrics.authFailed.Inc()
		return newError(http.StatusUnauthorized, frontdoor.CodeUnauthorized, "wrong %s token", kind)
	}
}

// guardWait holds a request whose address sent too many wrong tokens
// until the AuthGuard lets its token be checked, or refuses it (429)
// if that would take too long.
func (s *Server) guardWait(r *http.Request, addr string) error {
	wait, ok := s.cfg.AuthGuard.Wait(addr)
	if !ok {
		s.metrics.authRefused.Inc()
		e := newError(http.StatusTooManyRequests, frontdoor.CodeRateLimited, "too many wrong tokens from your address; retry later")
		e.RetryAfter = int(authguard.DefaultMaxWait / time.Second)
		return e
	}
	if wait == 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.Context().Done(): // the client left, or the server is closing
		return newError(http.StatusServiceUnavailable, frontdoor.CodeTimeout, "gave up waiting for the token check: %v", r.Context().Err())
	}
}

// matchToken reports whether got is one of the tokens of sets. It
// compares with every token, not stopping at a match, so the time taken
// says nothing about which one matched.
func matchToken(got string, sets ...[][]byte) bool {
	match := 0
	for _, set := range sets {
		for _, t := range set {
			match |= subtle.ConstantTimeCompare([]byte(got), t)
		}
	}
	return match == 1
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
	encodeErr   *encodeFailure // set by writeJSON, logged by instrument
}

// encodeFailure is a response writeJSON could not encode.
type encodeFailure struct {
	id     string // in the client's error message too
	what   string // the Go type of the value
	status int    // the status the handler meant to send
	err    error
}

// findStatusWriter returns the statusWriter that instrument put under w,
// looking through wrappers that Unwrap, or nil.
func findStatusWriter(w http.ResponseWriter) *statusWriter {
	for w != nil {
		if sw, ok := w.(*statusWriter); ok {
			return sw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status, w.wroteHeader = code, true // 1xx informational headers are not the status
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = http.StatusOK, true
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) statusCode() int {
	if !w.wroteHeader {
		return http.StatusOK // net/http sends 200 for a handler that wrote nothing
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes through so streaming handlers (added later) still stream.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// requireJSONBody refuses a write (any method but GET, HEAD and OPTIONS)
// whose Content-Type is set to anything but JSON or NDJSON, with 415. A
// browser lets any page send a cross-site POST without asking the server
// first only with a form type (text/plain, form-urlencoded, multipart):
// refusing those keeps another site's page from liking or incrementing
// through a visitor's browser. No Content-Type at all is accepted; browsers
// always send one with a body.
func (s *Server) requireJSONBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if ct := r.Header.Get("Content-Type"); ct != "" && !jsonMediaType(ct) {
				s.writeError(w, r, newError(http.StatusUnsupportedMediaType, frontdoor.CodeMediaType,
					"Content-Type %q: send application/json (or application/x-ndjson to /v1/events)", ct))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// maxClientTimeout bounds api.TimeoutHeader's value; the server's own request
// timeout bounds a write anyway.
const maxClientTimeout = 24 * time.Hour

// clientTimeout bounds the request's context by api.TimeoutHeader.
func (s *Server) clientTimeout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get(api.TimeoutHeader)
		if v == "" {
			next.ServeHTTP(w, r)
			return
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 || ms > maxClientTimeout.Milliseconds() {
			s.writeError(w, r, newError(http.StatusBadRequest, frontdoor.CodeBadTimeout,
				"%s %q: send the milliseconds the client waits, 1 to %d", api.TimeoutHeader, v, maxClientTimeout.Milliseconds()))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// jsonMediaType reports whether a Content-Type names JSON or NDJSON,
// whatever its parameters (charset=utf-8).
func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || mt == "application/x-ndjson")
}
