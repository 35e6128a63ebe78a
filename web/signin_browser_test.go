package web_test

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	apihttp "github.com/subagentd/subagentd/internal/http"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/web"
)

// TestBrowser_SignInCookieAndEventSource: with tokens configured a real
// browser signs in with fetch, and the HttpOnly cookie it gets then
// authenticates API calls and EventSource; a text/plain POST (what a
// cross-site form can send) is refused; sign-out ends the session.
func TestBrowser_SignInCookieAndEventSource(t *testing.T) {
	const token = "browser-token-0123456789"
	st := memstore.New()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc := subagent.NewService(subagent.Config{Store: st, Logger: log, Owner: "web-test"})
	api := apihttp.NewServer(apihttp.Config{
		Service: svc, Sessions: roots.New(roots.Config{Store: st}), Store: st, Logger: log, Dashboard: web.FS,
		Tokens: []store.Token{{Tenant: "alpha", Hash: sha256.Sum256([]byte(token))}},
	})
	ts := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Shutdown(ctx)
		_ = api.Shutdown(ctx)
		ts.Close()
	})

	b := newBrowser(t)
	b.do("open a public page of the server", chromedp.Navigate(ts.URL+"/healthz"))
	type result struct {
		Before, SignIn, After, Create, Plain, Stream, StreamAfterSignOut int
		Tenant, Cookie                                                   string
	}
	got := eval[result](b, "sign in and use the cookie", `(async () => {
		const streamStatus = () => new Promise(resolve => {
			const es = new EventSource('/v1/events');
			es.onopen = () => { es.close(); resolve(200); };
			es.onerror = () => { if (es.readyState === EventSource.CLOSED) resolve(0); };
		});
		const out = {};
		out.Before = (await fetch('/v1/auth/session')).status;
		out.SignIn = (await fetch('/v1/auth/session', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({token: `+jsString(token)+`})})).status;
		const who = await fetch('/v1/auth/session');
		out.After = who.status;
		out.Tenant = (await who.json()).tenant;
		out.Cookie = document.cookie;
		out.Create = (await fetch('/v1/sessions', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: '{"label":"from the browser"}'})).status;
		out.Plain = (await fetch('/v1/sessions', {method: 'POST', headers: {'Content-Type': 'text/plain'}, body: '{}'})).status;
		out.Stream = await streamStatus();
		await fetch('/v1/auth/session', {method: 'DELETE'});
		out.StreamAfterSignOut = await streamStatus();
		return out;
	})()`)
	want := result{Before: 401, SignIn: 204, After: 200, Tenant: "alpha", Cookie: "", Create: 201, Plain: 415, Stream: 200, StreamAfterSignOut: 0}
	if got != want {
		t.Fatalf("browser saw %+v, want %+v", got, want)
	}
}
