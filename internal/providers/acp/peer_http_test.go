package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	httpapi "github.com/subagentd/subagentd/internal/http"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The third-party agent through the whole service: configured as a
// provider, started and cancelled over HTTP.

// peerServer serves the HTTP API with the TypeScript example agent
// registered as provider "fake".
func peerServer(t *testing.T) (*httptest.Server, *bundle) {
	t.Helper()
	node, script := tsExampleAgent(t)
	p, b := setup(t, "", func(c *config.ProviderConfig) {
		c.Command, c.Args = node, []string{script}
		c.DisposeEOFGrace = 2 * time.Second
	})
	return serve(t, p, b), b
}

// serve serves the HTTP API with p registered, until the test ends.
func serve(t *testing.T, p *Provider, b *bundle) *httptest.Server {
	t.Helper()
	svc := subagent.NewService(subagent.Config{Store: b.store, Logger: p.log, Owner: "test"})
	if err := svc.Register(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	api := httpapi.NewServer(httpapi.Config{Service: svc, Store: b.store, Logger: p.log, Registry: httpapi.NewRegistry(),
		Sessions: roots.New(roots.Config{Store: b.store})})
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Shutdown(ctx); err != nil { // settles and reaps every run
			t.Error(err)
		}
		srv.Close()
	})
	return srv
}

// post sends body to path and decodes the answer, failing unless the
// status is want.
func post(t *testing.T, srv *httptest.Server, method, path, body string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	var out map[string]any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("decode %s: %v", data, err)
		}
	}
	return out
}

func runBody(prompt string) string {
	return fmt.Sprintf(`{"provider":"fake","parentSessionId":%q,"label":"peer","prompt":[{"type":"text","text":%q}]}`, parentID, prompt)
}

func TestPeer_OverHTTP_RunCompletesWithTheAgentsText(t *testing.T) {
	t.Parallel()
	srv, _ := peerServer(t)
	run := post(t, srv, http.MethodPost, "/v1/runs?wait=true", runBody("hello"), http.StatusCreated)
	res, _ := run["result"].(map[string]any)
	if run["state"] != "settled" || res == nil || res["stopReason"] != subagent.StopCompleted {
		t.Fatalf("run %v, want settled completed", run)
	}
	out, _ := json.Marshal(res["output"])
	var blocks []model.Block
	if err := json.Unmarshal(out, &blocks); err != nil || !strings.HasPrefix(model.Text(blocks), "I'll help you with that.") {
		t.Fatalf("output %s, want the agent's streamed text", out)
	}
}

func TestPeer_OverHTTP_CancelMidTurnSettlesAborted(t *testing.T) {
	t.Parallel()
	srv, b := peerServer(t)
	run := post(t, srv, http.MethodPost, "/v1/runs", runBody("hello"), http.StatusCreated)
	child := run["childSessionId"].(string)
	waitForEvent(t, b.store, child, isTextChunk("I'll help you with that. Let me start by reading some files to understand the current situation."))
	id := run["runId"].(string)
	post(t, srv, http.MethodPost, "/v1/runs/"+id+"/cancel", "", http.StatusAccepted)
	got := post(t, srv, http.MethodGet, "/v1/runs/"+id+"?wait=30", "", http.StatusOK)
	res, _ := got["result"].(map[string]any)
	if got["state"] != "settled" || res == nil || res["stopReason"] != subagent.StopAborted {
		t.Fatalf("run %v, want settled aborted", got)
	}
}
