package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
)

// pushed is one push delivery a receiver got.
type pushed struct {
	path   string
	header http.Header
	body   []byte
	at     time.Time // when the receiver got it
}

// pushReceiver is a real HTTP server on loopback that records every
// request it gets.
func pushReceiver(t *testing.T) (string, <-chan pushed) {
	t.Helper()
	got := make(chan pushed, 100)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- pushed{path: r.URL.Path, header: r.Header.Clone(), body: b, at: time.Now()}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc.URL, got
}

// TestA2A_PushConfigGetsTheSignedSettlement: a push config made while a
// streamed task works is listed, read and deleted with the other config
// methods, and receives the task's completion as a2a-go's push sender
// sends it, with the config's Authorization header and a Standard
// Webhooks signature made with its token — on memstore and on Postgres,
// over both bindings.
func TestA2A_PushConfigGetsTheSignedSettlement(t *testing.T) {
	t.Parallel()
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		base := wiredServer(t, map[string]string{"SUBAGENTD_TOKENS": "a2a:" + a2aToken, "SUBAGENTD_WEBHOOK_ALLOW_PRIVATE": "true"})
		testPushConfig(t, base, a2aToken)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		env := replicaEnv(pgtest.URL(t), "replica-push")
		env["SUBAGENTD_WEBHOOK_ALLOW_PRIVATE"] = "true"
		testPushConfig(t, startServer(t, env).base, "")
	})
}

func testPushConfig(t *testing.T, base, token string) {
	for _, tp := range a2aTransports {
		t.Run(string(tp), func(t *testing.T) {
			t.Parallel()
			c, card := a2aClient(t, base, "spawn", tp, token)
			if !card.Capabilities.PushNotifications {
				t.Fatalf("card capabilities %+v: want pushNotifications", card.Capabilities)
			}
			url, got := pushReceiver(t)
			secret := "push token of " + string(tp)
			var task *a2a.Task
			var final a2a.TaskState
			var finalAt time.Time
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			for ev, err := range c.SendStreamingMessage(ctx, textMessage("/sleep 4s\npush me", "", "")) {
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				switch ev := ev.(type) {
				case *a2a.Task:
					task = ev
					configs(t, c, task.ID, url, secret)
				case *a2a.TaskStatusUpdateEvent:
					if ev.Status.State.Terminal() {
						final, finalAt = ev.Status.State, time.Now()
					}
				}
			}
			if task == nil || final != a2a.TaskStateCompleted {
				t.Fatalf("stream of %+v ended %s, want completed", task, final)
			}

			var d pushed
			select {
			case d = <-got:
			case <-time.After(60 * time.Second):
				t.Fatal("no push delivery within 60s of the task's completion")
			}
			t.Logf("push delivery received %v after the stream's final status (negative: before)", d.at.Sub(finalAt))
			wh, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte(secret)))
			if err != nil {
				t.Fatal(err)
			}
			if err := wh.Verify(d.body, d.header); err != nil {
				t.Fatalf("push delivery does not verify with the config's token: %v (headers %v)", err, d.header)
			}
			if d.path != "/cfg-1" || d.header.Get("Authorization") != "Bearer cred-1" {
				t.Fatalf("delivery to %s with Authorization %q, want /cfg-1 with the config's", d.path, d.header.Get("Authorization"))
			}
			var sr a2a.StreamResponse
			if err := json.Unmarshal(d.body, &sr); err != nil {
				t.Fatalf("push body %s: %v", d.body, err)
			}
			up, ok := sr.Event.(*a2a.TaskStatusUpdateEvent)
			if !ok || up.TaskID != task.ID || up.ContextID != task.ContextID || up.Status.State != a2a.TaskStateCompleted || up.Status.Timestamp == nil {
				t.Fatalf("push body %s: want the task's completed status update", d.body)
			}
			select {
			case extra := <-got:
				t.Fatalf("a second delivery %s %s", extra.path, extra.body)
			default:
			}
			if _, err := c.CreateTaskPushConfig(t.Context(), &a2a.PushConfig{TaskID: task.ID, URL: url}); !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("a config for a completed task: %v, want InvalidParams", err)
			}
		})
	}
}

// configs makes configs cfg-1 (kept) and cfg-2 (deleted) for working task
// id, and checks what the config methods answer.
func configs(t *testing.T, c *a2aclient.Client, id a2a.TaskID, url, token string) {
	t.Helper()
	ctx := t.Context()
	want := &a2a.PushConfig{TaskID: id, ID: "cfg-1", URL: url + "/cfg-1", Token: token, Auth: &a2a.PushAuthInfo{Scheme: "Bearer", Credentials: "cred-1"}}
	made, err := c.CreateTaskPushConfig(ctx, want)
	if err != nil || made.ID != "cfg-1" || made.URL != want.URL || made.Token != token || made.Auth == nil || *made.Auth != *want.Auth {
		t.Fatalf("CreateTaskPushConfig = %+v, %v", made, err)
	}
	if _, err := c.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: id, ID: "cfg-2", URL: url + "/cfg-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: id, ID: "bad", URL: "ftp://x.example/"}); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("a config with an ftp URL: %v, want InvalidParams", err)
	}
	if _, err := c.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: "no-such-task", URL: url}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Errorf("a config for an unknown task: %v, want TaskNotFound", err)
	}
	list, err := c.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: id})
	if err != nil || len(list) != 2 || list[0].ID != "cfg-1" || list[1].ID != "cfg-2" {
		t.Fatalf("ListTaskPushConfigs = %+v, %v; want cfg-1, cfg-2", list, err)
	}
	if err := c.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: id, ID: "cfg-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: id, ID: "cfg-2"}); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Errorf("GetTaskPushConfig(deleted) = %v, want InvalidParams", err)
	}
	got, err := c.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: id, ID: "cfg-1"})
	if err != nil || got.URL != want.URL || got.TaskID != id {
		t.Fatalf("GetTaskPushConfig(cfg-1) = %+v, %v", got, err)
	}
}

// TestRestart_SIGKILL_PushDeliveredAfterRestart: a task completes and the
// process is SIGKILLed while the push delivery of its completion is in
// flight; the restarted process delivers it, with the same webhook-id,
// the config's Authorization and a signature made with its token.
func TestRestart_SIGKILL_PushDeliveredAfterRestart(t *testing.T) {
	t.Parallel()
	var down atomic.Bool // the receiver holds requests without answering
	down.Store(true)
	held, got := make(chan pushed, 10), make(chan pushed, 10)
	ended := make(chan struct{})
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		d := pushed{path: r.URL.Path, header: r.Header.Clone(), body: b}
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

	env := replicaEnv(pgtest.URL(t), "replica-push-kill")
	env["SUBAGENTD_WEBHOOK_ALLOW_PRIVATE"] = "true"
	a := startServer(t, env)
	c, _ := a2aClient(t, a.base, "spawn", a2a.TransportProtocolJSONRPC, "")
	const token = "the push token"
	var task *a2a.Task
	for ev, err := range c.SendStreamingMessage(t.Context(), textMessage("/sleep 2s\nkill me", "", "")) {
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if tk, ok := ev.(*a2a.Task); ok {
			task = tk
			if _, err := c.CreateTaskPushConfig(t.Context(), &a2a.PushConfig{TaskID: task.ID, URL: rc.URL, Token: token,
				Auth: &a2a.PushAuthInfo{Scheme: "Bearer", Credentials: "kill-cred"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var first pushed
	select {
	case first = <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("no push delivery attempt within 60s of the completion")
	}
	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("SIGKILL: process exited cleanly")
	}

	down.Store(false)
	startServer(t, env) // the same replica id: it takes its own lease back at once
	var d pushed
	select {
	case d = <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("the push was not delivered after the restart within 60s")
	}
	wh, err := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte(token)))
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(d.body, d.header); err != nil {
		t.Fatalf("the delivery after the restart does not verify: %v", err)
	}
	if id := d.header.Get("webhook-id"); id == "" || id != first.header.Get("webhook-id") || string(d.body) != string(first.body) || d.header.Get("Authorization") != "Bearer kill-cred" {
		t.Fatalf("after the restart: id %q body %s auth %q; before: id %q body %s", id, d.body, d.header.Get("Authorization"), first.header.Get("webhook-id"), first.body)
	}
	var sr a2a.StreamResponse
	if err := json.Unmarshal(d.body, &sr); err != nil {
		t.Fatal(err)
	}
	if up, ok := sr.Event.(*a2a.TaskStatusUpdateEvent); !ok || up.TaskID != task.ID || up.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("delivered %s, want the task's completion", d.body)
	}
}
