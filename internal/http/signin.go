package http

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Browser sign-in (DESIGN §7): EventSource cannot send an Authorization
// header, so the dashboard trades a token for a session cookie once.
const (
	authSessionPath = "/v1/auth/session"
	sessionCookie   = "subagentd_session"
	// sessionTTL is how long a sign-in lasts; the dashboard then asks for
	// the token again.
	sessionTTL = 12 * time.Hour
	// maxSignins bounds the live sign-ins kept in memory; beyond it the
	// oldest is ended.
	maxSignins = 10000
)

// signins are the live browser sessions of this process, by the SHA-256 of
// their cookie value (a memory dump yields no usable cookie). They live in
// memory: a restart, or another replica, asks the browser to sign in
// again.
type signins struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]signin
}

type signin struct {
	tenant  string
	expires time.Time
}

// create starts a session of tenant and returns its cookie value.
func (s *signins) create(tenant string, now time.Time) string {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand documents it)
	value := base64.RawURLEncoding.EncodeToString(raw[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[[sha256.Size]byte]signin{}
	}
	if len(s.byID) >= maxSignins {
		s.evict(now)
	}
	s.byID[sha256.Sum256([]byte(value))] = signin{tenant: tenant, expires: now.Add(sessionTTL)}
	return value
}

// evict drops expired sessions, and the oldest one if none had expired;
// s.mu is held.
func (s *signins) evict(now time.Time) {
	var oldest [sha256.Size]byte
	var oldestExp time.Time
	for k, v := range s.byID {
		if !v.expires.After(now) {
			delete(s.byID, k)
			continue
		}
		if oldestExp.IsZero() || v.expires.Before(oldestExp) {
			oldest, oldestExp = k, v.expires
		}
	}
	if len(s.byID) >= maxSignins {
		delete(s.byID, oldest)
	}
}

// tenant returns the tenant of a live session cookie value.
func (s *signins) tenant(value string, now time.Time) (string, bool) {
	k := sha256.Sum256([]byte(value))
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byID[k]
	if !ok {
		return "", false
	}
	if !v.expires.After(now) {
		delete(s.byID, k)
		return "", false
	}
	return v.tenant, true
}

// end invalidates a session cookie value.
func (s *signins) end(value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(value)))
}

// getAuthSession tells the dashboard whether it must sign in: 200 with the
// tenant when no tokens are configured or the request is authenticated,
// else 401 UNAUTHENTICATED.
func (s *Server) getAuthSession(w http.ResponseWriter, r *http.Request) error {
	tenant, _, err := s.authenticate(r)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, authSessionJSON{AuthRequired: len(s.tokens) > 0, Tenant: tenant})
	return nil
}

// createAuthSession trades a token for a session cookie: 204 with
// Set-Cookie, 401 for a token that is not configured. Without configured
// tokens there is nothing to sign in to: 204 without a cookie. Attempts
// count against the rate of the caller's address, not of a tenant.
func (s *Server) createAuthSession(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkBody(w, r, viaCookie); err != nil {
		return err
	}
	if err := s.checkOrigin(r, viaCookie); err != nil {
		return err
	}
	if wait, ok := s.limiter.allow("signin:"+remoteHost(r), time.Now()); !ok {
		return rateLimited(wait, "too many sign-ins from this address")
	}
	var req signinRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if len(s.tokens) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	tenant, ok := s.tokenTenant(req.Token)
	if !ok {
		return subagent.Errorf(subagent.EUnauthenticated, "the token is not valid")
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.signins.create(tenant, time.Now()), Path: "/",
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	s.log.InfoContext(store.WithTenant(r.Context(), tenant), "browser signed in", "tenant", tenant)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteAuthSession signs out: the session ends on the server and the
// cookie is cleared. Idempotent: 204 with or without a session.
func (s *Server) deleteAuthSession(w http.ResponseWriter, r *http.Request) error {
	if err := s.checkOrigin(r, viaCookie); err != nil {
		return err
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.signins.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// remoteHost is the IP of the peer, without its port.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

type signinRequest struct {
	Token string `json:"token" validate:"required,max=4096"`
}

type authSessionJSON struct {
	AuthRequired bool   `json:"authRequired"`
	Tenant       string `json:"tenant"`
}
