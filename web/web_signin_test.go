package web_test

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	apihttp "github.com/subagentd/subagentd/internal/http"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/store"
)

// TestDashboard_SignInWithTokenThenSignOut: with tokens configured, a
// first visit gets a token prompt (nothing else loads); a wrong token is
// refused in words and the prompt stays; the right token signs in, the
// page loads live over the session cookie and names the tenant; signing out
// brings the prompt back.
func TestDashboard_SignInWithTokenThenSignOut(t *testing.T) {
	const token = "s3cret-token-0123456789"
	release := make(chan struct{})
	srv := startServer(t, scripted.New(scripted.Step{Text: answer, Pause: release}), func(c *apihttp.Config) {
		c.Tokens = []store.Token{{Tenant: "acme", Hash: sha256.Sum256([]byte(token))}}
	})
	res, err := http.Get(srv.URL + "/v1/auth/session")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/auth/session without a cookie: %s, want 401", res.Status)
	}

	b := newBrowser(t)
	b.do("opening the dashboard", chromedp.Navigate(srv.URL))
	b.waitFor("the token prompt is shown and has focus", `!document.querySelector('[data-testid="signin"]').hidden && document.activeElement.id === 'signin-token'`)
	b.screenshot("signin-prompt")

	b.do("entering a wrong token", chromedp.SendKeys(chromedp.CSS("#signin-token"), "wrong"), chromedp.Click(chromedp.CSS("#signin-submit")))
	b.waitFor("the token is refused in words and the prompt stays",
		`document.querySelector('[data-testid="signin-error"]').textContent.startsWith('UNAUTHENTICATED') && !document.querySelector('[data-testid="signin"]').hidden`)

	b.do("entering the right token",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#signin-token').value = ''`),
		chromedp.SendKeys(chromedp.CSS("#signin-token"), token), chromedp.Click(chromedp.CSS("#signin-submit")))
	b.waitFor("the prompt is gone and the page is live over the cookie", `document.querySelector('[data-testid="signin"]').hidden && `+connConnected+
		` && document.querySelector('#start-provider option[value="spawn"]')`)
	b.waitFor("the account names the tenant and offers sign-out",
		`!document.querySelector('[data-testid="account"]').hidden && document.querySelector('[data-testid="account-tenant"]').textContent.includes('acme')`)
	b.waitFor("the session cookie is not readable by scripts", `!document.cookie.includes('subagentd_session')`)
	child := startRunFromForm(b, "signed", "Say hello")
	b.waitFor("the run's transcript streams over the cookie", streamedAnswer)
	close(release)
	b.waitFor("the run completes", nodeIn(child, "completed"))
	b.screenshot("signed-in")

	b.click("signing out", "#signout")
	// Sign-out reloads the page: a poll that the reload interrupts is tried
	// again in the new document.
	for i := 0; ; i++ {
		_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](`document.querySelector('[data-testid="signin"]')?.hidden === false`,
			chromedp.WithPollingTimeout(waitTimeout)))
		if err == nil {
			break
		}
		// The reload shows up as a navigated target or a lost context.
		if i == 4 || !(strings.Contains(err.Error(), "navigated") || strings.Contains(err.Error(), "context")) {
			b.fail("waiting until the token prompt is back", err)
		}
	}
	b.screenshot("signed-out")
}
