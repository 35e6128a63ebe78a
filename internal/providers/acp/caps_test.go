package acp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/subagent"
)

// An agent that can resume is never described as one that cannot: before
// and while its capability probe runs, readiness is 503 and the provider's
// description waits; once the probe ended, /readyz is 200 and resume true.
func TestProbe_ReadinessAndListingWaitForIt(t *testing.T) {
	t.Parallel()
	ready, waitReady := readyFIFO(t)
	release := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(release, 0o600); err != nil {
		t.Fatal(err)
	}
	p, b := setup(t, "text", func(c *config.ProviderConfig) {
		c.Env["FAKE_CAPS"], c.Env["FAKE_READY"], c.Env["FAKE_INIT_RELEASE"] = "resume", ready, release
	})
	srv := serve(t, p, b)
	post(t, srv, http.MethodGet, "/readyz", "", http.StatusServiceUnavailable) // no probe ran yet

	probed := make(chan error, 1)
	go func() { probed <- p.Probe(context.Background()) }()
	waitReady() // initialize is pending in the agent
	if got := post(t, srv, http.MethodGet, "/readyz", "", http.StatusServiceUnavailable); got["code"] != "NOT_READY" {
		t.Fatalf("/readyz during the probe: %v", got)
	}
	// The description does not come while the probe runs: a client that
	// gives up after a second has none.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if status, body, err := get(ctx, srv, "/v1/providers/fake"); err == nil {
		t.Fatalf("the provider was described while its probe ran: %d %s", status, body)
	}
	type answer struct {
		status int
		body   string
		err    error
	}
	described := make(chan answer, 1)
	go func() {
		status, body, err := get(t.Context(), srv, "/v1/providers/fake")
		described <- answer{status, body, err}
	}()

	f, err := os.OpenFile(release, os.O_WRONLY, 0) // initialize answers
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	select {
	case err := <-probed:
		if err != nil {
			t.Fatalf("Probe: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the probe did not end")
	}
	select {
	case got := <-described:
		if got.err != nil || got.status != http.StatusOK || !strings.Contains(got.body, `"resume":true`) {
			t.Fatalf("provider described as %d %s (%v), want resume true", got.status, got.body, got.err)
		}
	case <-time.After(wait):
		t.Fatal("the waiting description did not come")
	}
	if got := post(t, srv, http.MethodGet, "/readyz", "", http.StatusOK); got["unavailableProviders"] != nil {
		t.Fatalf("/readyz after the probe: %v", got)
	}
	list := post(t, srv, http.MethodGet, "/v1/providers", "", http.StatusOK)
	if providers, _ := list["providers"].([]any); len(providers) != 1 || providers[0].(map[string]any)["resume"] != true {
		t.Fatalf("providers %v, want fake with resume true", list)
	}
}

// get fetches path within ctx.
func get(ctx context.Context, srv *httptest.Server, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// A provider whose agent cannot start does not hold readiness back: it is
// listed with the reason, and described at once.
func TestProbe_AgentThatCannotStartIsListedByReadiness(t *testing.T) {
	t.Parallel()
	p, b := setup(t, "exitinit", func(c *config.ProviderConfig) { c.Env["FAKE_CAPS"] = "resume" })
	srv := serve(t, p, b)
	err := p.Probe(t.Context())
	const reason = `ACP agent of provider "fake" is unavailable: initialize: agent process exited (exit code 2)`
	if subagent.ErrorMessage(err) != reason {
		t.Fatalf("Probe = %v, want %q", err, reason)
	}
	got := post(t, srv, http.MethodGet, "/readyz", "", http.StatusOK)
	down, _ := got["unavailableProviders"].([]any)
	if len(down) != 1 || down[0].(map[string]any)["name"] != "fake" || down[0].(map[string]any)["reason"] != reason {
		t.Fatalf("/readyz = %v, want fake listed with %q", got, reason)
	}
	if got := post(t, srv, http.MethodGet, "/v1/providers/fake", "", http.StatusOK); got["resume"] != false {
		t.Fatalf("provider %v, want resume false", got)
	}
}

// A probe that runs out of time says so; one whose caller gave up says
// nothing about the agent, so readers keep waiting for a probe that does.
func TestProbe_DeadlineAndCancellation(t *testing.T) {
	t.Parallel()
	p, _ := setup(t, "hanginit")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Probe(ctx); subagent.ErrorCode(err) != subagent.EAborted {
		t.Fatalf("cancelled Probe = %v, want %s", err, subagent.EAborted)
	}
	if err := p.WaitProbe(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitProbe after a cancelled probe = %v, want it still waiting", err)
	}
	ctx, cancel = context.WithDeadline(t.Context(), time.Now())
	defer cancel()
	err := p.Probe(ctx)
	if subagent.ErrorCode(err) != subagent.EAgentUnavailable || !strings.Contains(subagent.ErrorMessage(err), "did not finish its capability probe") {
		t.Fatalf("timed-out Probe = %v, want %s saying so", err, subagent.EAgentUnavailable)
	}
	if got := p.WaitProbe(t.Context()); got == nil || got.Error() != err.Error() {
		t.Fatalf("WaitProbe = %v, want the probe's %v", got, err)
	}
}
