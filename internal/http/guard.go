package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Codes of the security layer (docs/architecture.md §8, §10).
const (
	codeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	codeIdempotencyReused    = "IDEMPOTENCY_KEY_REUSED"
	codeIdempotencyInUse     = "IDEMPOTENCY_KEY_IN_USE"
)

// authVia says how a request was authenticated.
type authVia int

const (
	viaNone   authVia = iota // no tokens are configured
	viaBearer                // Authorization: Bearer
	viaCookie                // the dashboard's session cookie
)

// isLoopbackHost reports whether a Host header (with or without a port)
// names this machine: 127.0.0.1, [::1] or localhost. Other addresses of
// 127/8 are refused too: browsers never send them for localhost.
func isLoopbackHost(host string) bool {
	h := host
	if hp, _, err := net.SplitHostPort(host); err == nil {
		h = hp
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		h = host[1 : len(host)-1]
	}
	switch strings.ToLower(strings.TrimSuffix(h, ".")) {
	case "127.0.0.1", "::1", "localhost":
		return true
	}
	return false
}

// IsLoopbackAddr reports whether a listen address binds only loopback
// interfaces: without tokens the server must not listen anywhere else.
// An empty host (":8080") binds every interface.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// protected reports whether path needs authentication: every /v1 route
// (except the sign-in route, which authenticates itself), the MCP face,
// the A2A face but its agent cards, /readyz and /metrics. The dashboard,
// the spec, /docs, /healthz and the agent cards are public.
func protected(path string) bool {
	if path == authSessionPath || a2aPublic(path) {
		return false
	}
	return path == "/v1" || strings.HasPrefix(path, "/v1/") || path == mcpPath ||
		path == a2aPrefix || strings.HasPrefix(path, a2aPrefix+"/") || path == "/readyz" || path == "/metrics"
}

// guard is the security middleware, in the order its checks run: the
// path, query and headers must be UTF-8 (400), the Host must be loopback
// when no tokens are configured (403), CORS preflights are answered, the
// caller is authenticated (401), browsers' writes must come from this
// origin (403), the tenant's rate is bounded (429), and a POST body must
// be JSON (415) and within the body limit (413).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkText(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		if len(s.tokens) == 0 && !isLoopbackHost(r.Host) {
			s.writeError(w, r, subagent.Errorf(subagent.EForbidden,
				"Host %q is not loopback: without SUBAGENTD_TOKENS this server answers only 127.0.0.1, [::1] and localhost", clip(r.Host, 100)))
			return
		}
		if s.cors(w, r) {
			return
		}
		if !protected(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		tenant, via, err := s.authenticate(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if err := s.checkOrigin(r, via); err != nil {
			s.writeError(w, r, err)
			return
		}
		ctx := store.WithTenant(r.Context(), tenant)
		if wait, ok := s.limiter.allow("tenant:"+tenant, time.Now()); !ok {
			s.writeError(w, r.WithContext(ctx), rateLimited(wait, "this tenant sends more than %g requests per second (SUBAGENTD_RATE_LIMIT)", s.limiter.rate))
			return
		}
		r = r.WithContext(ctx)
		if r.Method == http.MethodPost {
			if err := s.checkBody(w, r, via); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkText refuses a request whose path, query or headers hold a string
// that is not UTF-8 or holds a NUL character (INVALID_REQUEST): no handler
// or store ever sees such text. Bodies are checked where they are decoded
// (decode).
func checkText(r *http.Request) error {
	if !validText(r.URL.Path) || !validText(r.URL.RawPath) {
		return subagent.Errorf(subagent.EInvalidRequest, "the request path is not valid UTF-8")
	}
	fields := map[string]string{}
	for name, values := range queryToCheck(r.URL.RawQuery) {
		if !validText(name) {
			fields["query"] = "parameter names must be UTF-8 without NUL characters"
			continue
		}
		for _, v := range values {
			if !validText(v) {
				fields[clip(name, 100)] = "must be UTF-8 without NUL characters"
			}
		}
	}
	if !validText(r.Host) {
		fields["Host"] = "must be UTF-8"
	}
	for name, values := range r.Header {
		for _, v := range values {
			if !validText(v) {
				fields[name] = "must be UTF-8"
			}
		}
	}
	if len(fields) > 0 {
		return invalid(fields)
	}
	return nil
}

// queryToCheck is the parsed rawQuery whose names and values checkText
// checks, nil when none can fail the check: without a percent escape
// every name and value is a piece of rawQuery cut at ASCII bytes ('&',
// '='; '+' becomes a space), so rawQuery's own validText answers for all.
func queryToCheck(rawQuery string) url.Values {
	if !strings.Contains(rawQuery, "%") && validText(rawQuery) {
		return nil
	}
	q, _ := url.ParseQuery(rawQuery) // what r.URL.Query() parses
	return q
}

// validText reports whether s is UTF-8 without NUL characters, which
// Postgres refuses in text.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// authenticate returns the tenant of r: the default tenant when no tokens
// are configured, else the tenant of its Bearer token or of its session
// cookie. A presented but wrong credential is UNAUTHENTICATED even when the
// other one would do.
func (s *Server) authenticate(r *http.Request) (tenant string, via authVia, err error) {
	if len(s.tokens) == 0 {
		return store.DefaultTenant, viaNone, nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || token == "" {
			return "", 0, subagent.Errorf(subagent.EUnauthenticated, "the Authorization header must be \"Bearer <token>\"")
		}
		if t, ok := s.tokenTenant(strings.TrimSpace(token)); ok {
			return t, viaBearer, nil
		}
		return "", 0, subagent.Errorf(subagent.EUnauthenticated, "the bearer token is not valid")
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		t, ok, err := s.signinTenant(r.Context(), c.Value, time.Now())
		if err != nil {
			return "", 0, err
		}
		if ok {
			return t, viaCookie, nil
		}
		return "", 0, subagent.Errorf(subagent.EUnauthenticated, "the session has ended; sign in again")
	}
	return "", 0, subagent.Errorf(subagent.EUnauthenticated, "send Authorization: Bearer <token>, or sign in at POST %s", authSessionPath)
}

// tokenTenant returns the tenant of token, comparing its hash with every
// configured hash in constant time, so timing tells nothing about which
// bytes matched or which token was close.
func (s *Server) tokenTenant(token string) (string, bool) {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i, t := range s.tokens {
		if subtle.ConstantTimeCompare(h[:], t.Hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return s.tokens[found].Tenant, true
}

// checkOrigin refuses a write a browser may have sent from another site:
// unless it carries a bearer token (which no other site can attach), an
// unsafe method's Origin must be absent, this server's own, or a
// configured CORS origin (FORBIDDEN).
func (s *Server) checkOrigin(r *http.Request, via authVia) error {
	if via == viaBearer {
		return nil
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	origin := r.Header.Get("Origin")
	if origin == "" || s.sameOrigin(r, origin) || slices.Contains(s.corsOrigins, origin) {
		return nil
	}
	return subagent.Errorf(subagent.EForbidden, "cross-origin write from %q refused", clip(origin, 200))
}

// sameOrigin reports whether origin names the host r was sent to.
func (s *Server) sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}

// cors answers a CORS preflight and adds the CORS headers for configured
// origins; it reports whether the request was answered. Without
// configured origins it does nothing: browsers then refuse cross-origin
// reads, and checkOrigin refuses cross-origin writes.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if len(s.corsOrigins) == 0 || origin == "" {
		return false
	}
	allowed := slices.Contains(s.corsOrigins, origin)
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	w.Header().Add("Vary", "Origin")
	if !allowed {
		if preflight {
			s.writeError(w, r, subagent.Errorf(subagent.EForbidden, "origin %q is not in SUBAGENTD_CORS_ORIGINS", clip(origin, 200)))
		}
		return preflight
	}
	w.Header().Set("Access-Control-Allow-Origin", origin)
	w.Header().Set("Access-Control-Allow-Credentials", "true")
	w.Header().Set("Access-Control-Expose-Headers", "Location, Retry-After, Preference-Applied, Idempotent-Replayed, WWW-Authenticate")
	if !preflight {
		return false
	}
	w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, Prefer")
	w.Header().Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// checkBody holds a POST to what docs/architecture.md §8 asks of bodies: a body (and
// every cookie-authenticated POST, bodiless or not: a cross-site form
// cannot send JSON) must be application/json or +json (415), and a body
// declared larger than the limit is 413 before a byte of it is read.
func (s *Server) checkBody(w http.ResponseWriter, r *http.Request, via authVia) error {
	if r.ContentLength > s.bodyLimit {
		return s.tooLarge(w, r)
	}
	if isJSON(r.Header.Get("Content-Type")) {
		return nil
	}
	if via != viaCookie && !hasBody(r) {
		return nil
	}
	return subagent.Errorf(codeUnsupportedMediaType, "the request body must be application/json (got %q)", clip(r.Header.Get("Content-Type"), 100))
}

// hasBody reports whether r carries at least one body byte. A body of
// unknown length (chunked) is probed with a one-byte read, which is put
// back.
func hasBody(r *http.Request) bool {
	if r.ContentLength >= 0 {
		return r.ContentLength > 0
	}
	var b [1]byte
	n, _ := io.ReadFull(r.Body, b[:])
	if n == 0 {
		return false
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b[:n]), r.Body), r.Body}
	return true
}

// isJSON reports whether a Content-Type is application/json or a +json
// type.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true // what nearly every client sends, without parsing
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// Bounds of the lingering read after a 413 (what nginx's lingering close
// does): the server reads and discards the rest of a refused body for at
// most lingerTime and lingerBytes, so that a client that sends its whole
// body before it reads (urllib, fetch) reads the answer rather than a
// connection reset. A body still coming past either bound is cut off.
const (
	lingerTime  = 30 * time.Second
	lingerBytes = 64 << 20
)

// lingerKey keys the *lingerMark of a request in its context.
type lingerKey struct{}

// lingerMark is set by tooLarge: the request's body is to be discarded
// once its answer is written.
type lingerMark struct{ on bool }

// linger is the outermost middleware: after the handler answered a
// request whose body it refused unread (tooLarge), it flushes the answer,
// then reads and discards the rest of the body within lingerTime and
// lingerBytes, and only then lets the server close the connection.
func (s *Server) linger(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mark := &lingerMark{}
		body := r.Body
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), lingerKey{}, mark)))
		if !mark.on {
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.Flush(); err != nil {
			return
		}
		_ = rc.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.CopyN(io.Discard, body, lingerBytes)
	})
}

// tooLarge marks the connection to close and r's body to be discarded
// after the answer (see linger), and returns PAYLOAD_TOO_LARGE.
func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request) error {
	if mark, ok := r.Context().Value(lingerKey{}).(*lingerMark); ok {
		// Reading the body after the answer is written needs full
		// duplex on HTTP/1.1.
		if err := http.NewResponseController(w).EnableFullDuplex(); err == nil {
			mark.on = true
		}
	}
	w.Header().Set("Connection", "close")
	return subagent.Errorf(subagent.EPayloadTooLarge, "request body exceeds %d bytes", s.bodyLimit)
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
