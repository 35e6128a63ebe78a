package http

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Browser sign-in (docs/architecture.md §10): EventSource cannot send an Authorization
// header, so the dashboard trades a token for a session cookie once.
const (
	authSessionPath = "/v1/auth/session"
	sessionCookie   = "subagentd_session"
	// sessionTTL is how long a sign-in lasts; the dashboard then asks for
	// the token again.
	sessionTTL = 12 * time.Hour
)

// newSignin starts a sign-in of tenant in the store, where every replica
// finds it, and returns its cookie value; the store keeps only its hash.
func (s *Server) newSignin(ctx context.Context, tenant string, now time.Time) (string, error) {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand documents it)
	value := base64.RawURLEncoding.EncodeToString(raw[:])
	sg := store.Signin{Hash: sha256.Sum256([]byte(value)), Tenant: tenant, Expires: now.Add(sessionTTL)}
	if err := s.store.CreateSignin(ctx, sg); err != nil {
		return "", fmt.Errorf("store sign-in: %w", err)
	}
	return value, nil
}

// signinTenant returns the tenant of a live sign-in cookie value, ok false
// for one that is unknown, signed out or expired, and the store's error
// when it cannot tell.
func (s *Server) signinTenant(ctx context.Context, value string, now time.Time) (tenant string, ok bool, err error) {
	sg, err := s.store.GetSignin(ctx, sha256.Sum256([]byte(value)), now)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("look up sign-in: %w", err)
	}
	return sg.Tenant, true, nil
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
	value, err := s.newSignin(r.Context(), tenant, time.Now())
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: value, Path: "/",
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
		if err := s.store.DeleteSignin(r.Context(), sha256.Sum256([]byte(c.Value))); err != nil {
			return fmt.Errorf("end sign-in: %w", err)
		}
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
