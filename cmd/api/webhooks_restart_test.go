package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// A run settles and the process is SIGKILLed while the delivery of its
// run.settled is in flight: the restarted process delivers it, with the
// same webhook-id and a valid signature.
func TestRestart_SIGKILL_WebhookDeliveredAfterRestart(t *testing.T) {
	t.Parallel()
	type delivery struct {
		header http.Header
		body   []byte
	}
	var down atomic.Bool // the receiver holds requests without answering
	down.Store(true)
	held := make(chan delivery, 10)
	got := make(chan delivery, 10)
	ended := make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		d := delivery{header: r.Header.Clone(), body: b}
		if down.Load() {
			held <- d
			select {
			case <-r.Context().Done(): // the sender died
			case <-ended:
			}
			return
		}
		got <- d
	}))
	t.Cleanup(rc.Close)
	t.Cleanup(func() { close(ended) })

	env := restartEnv(t)
	env["SUBAGENTD_WEBHOOK_ALLOW_PRIVATE"] = "true"
	a := startServer(t, env)
	var hook struct{ ID, Secret string }
	a.call(t, http.MethodPost, "/v1/webhooks", fmt.Sprintf(`{"url":%q,"events":["run.settled"]}`, rc.URL), http.StatusCreated, &hook)
	_, runs := startStalledRuns(t, a, 1)
	a.call(t, http.MethodPost, "/v1/runs/"+runs[0]+"/cancel", "", http.StatusAccepted, nil)
	var first delivery
	select {
	case first = <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery attempt of run.settled within 60s")
	}
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL: process exited cleanly")
	}

	down.Store(false)
	startServer(t, env) // the same replica id: it takes its own lease back at once
	var d delivery
	select {
	case d = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("run.settled was not delivered after the restart within 60s")
	}
	wh, err := standardwebhooks.NewWebhook(hook.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(d.body, d.header); err != nil {
		t.Fatalf("delivery after the restart does not verify: %v", err)
	}
	var body struct {
		Type string
		Data struct{ RunID, StopReason string }
	}
	if err := json.Unmarshal(d.body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Type != "run.settled" || body.Data.RunID != runs[0] || body.Data.StopReason != "aborted" ||
		d.header.Get("webhook-id") != first.header.Get("webhook-id") || string(d.body) != string(first.body) {
		t.Fatalf("after the restart %s %s, before the kill %s %s", d.header.Get("webhook-id"), d.body, first.header.Get("webhook-id"), first.body)
	}
}
