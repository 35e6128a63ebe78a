package http

import (
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// TestSignIn_EveryReplicaAcceptsTheCookie: on Postgres, a cookie that one
// server issued works on another server over the same database (another
// replica, or the same one after a restart), and a sign-out on either ends
// it on both.
func TestSignIn_EveryReplicaAcceptsTheCookie(t *testing.T) {
	url := pgtest.URL(t)
	a := setup(t, withTokens, func(c *Config) { c.Store = pgStoreAt(t, url) })
	b := setup(t, withTokens, func(c *Config) { c.Store = pgStoreAt(t, url) })

	r := a.want(t, 204, call{method: "POST", path: "/v1/auth/session", body: map[string]any{"token": tokenA}})
	cookie := map[string]string{"Cookie": strings.SplitN(r.header.Get("Set-Cookie"), ";", 2)[0]}
	var got authSessionJSON
	b.want(t, 200, call{method: "GET", path: "/v1/auth/session", header: cookie}).decode(t, &got)
	if got.Tenant != "alpha" {
		t.Fatalf("B's view of A's sign-in = %+v, want tenant alpha", got)
	}
	b.want(t, 201, call{method: "POST", path: "/v1/sessions", body: map[string]any{"label": "x"}, header: cookie})
	b.stream(t, "/v1/events", cookie).close()

	b.want(t, 204, call{method: "DELETE", path: "/v1/auth/session", header: cookie})
	for _, srv := range []*testBundle{a, b} {
		srv.wantProblem(t, 401, subagent.EUnauthenticated, call{method: "GET", path: "/v1/sessions", header: cookie})
	}
}

// TestSignIn_StoresTheHash: the store finds a sign-in by the SHA-256 of
// its cookie value, and a forged cookie is refused.
func TestSignIn_StoresTheHash(t *testing.T) {
	var st store.Store
	b := setup(t, withTokens, func(c *Config) { st = c.Store })
	r := b.want(t, 204, call{method: "POST", path: "/v1/auth/session", body: map[string]any{"token": tokenB}})
	value := strings.TrimPrefix(strings.SplitN(r.header.Get("Set-Cookie"), ";", 2)[0], sessionCookie+"=")
	sg, err := st.GetSignin(t.Context(), sha256.Sum256([]byte(value)), time.Now())
	if err != nil || sg.Tenant != "bravo" {
		t.Fatalf("sign-in by the cookie's hash = %+v, %v; want tenant bravo", sg, err)
	}
	b.wantProblem(t, 401, subagent.EUnauthenticated, call{method: "GET", path: "/v1/sessions", header: map[string]string{"Cookie": sessionCookie + "=forged"}})
}
