package http

import (
	"bytes"
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

// Codes of the security layer (DESIGN §3, §7).
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
// /readyz and /metrics. The dashboard, the spec, /docs and /healthz are
// public.
func protected(path string) bool {
	if path == authSessionPath {
		return false
	}
	return path == "/v1" || strings.HasPrefix(path, "/v1/") || path == mcpPath || path == "/readyz" || path == "/metrics"
}

// guard is the security middleware, in the order its checks run: the path
// must decode (400), the Host must be loopback when no tokens are
// configured (403), CORS preflights are answered, the caller is
// authenticated (401), browsers' writes must come from this origin (403),
// the tenant's rate is bounded (429), and a POST body must be JSON (415)
// and within the body limit (413).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !utf8.ValidString(r.URL.Path) || strings.ContainsRune(r.URL.Path, 0) {
			s.writeError(w, r, subagent.Errorf(subagent.EInvalidRequest, "the request path is not valid UTF-8"))
			return
		}
		if len(s.tokens) == 0 && !isLoopbackHost(r.Host) {
			s.writeError(w, r, subagent.Errorf(subagent.EUnauthorized,
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
	return subagent.Errorf(subagent.EUnauthorized, "cross-origin write from %q refused", clip(origin, 200))
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
			s.writeError(w, r, subagent.Errorf(subagent.EUnauthorized, "origin %q is not in SUBAGENTD_CORS_ORIGINS", clip(origin, 200)))
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

// checkBody holds a POST to what DESIGN §3 asks of bodies: a body (and
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

// drainLimit bounds how much of an oversized body the server reads (and
// discards) before answering 413, so that a client still sending does not
// get a connection reset instead of the answer.
const (
	drainLimit   = 4 << 20
	drainTimeout = 5 * time.Second
)

// tooLarge discards up to drainLimit bytes of the rest of r's body, marks
// the connection to close, and returns PAYLOAD_TOO_LARGE.
func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request) error {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(drainTimeout))
	_, _ = io.CopyN(io.Discard, r.Body, drainLimit)
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
