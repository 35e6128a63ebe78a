package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"
)

// a2aPath is one way of asking for the same turn.
type a2aPath struct {
	name string
	// setup prepares client i (a root session for the REST paths).
	setup func(ctx context.Context, a *api, i int) (string, error)
	// turn runs one turn to its completion.
	turn func(ctx context.Context, a *api, root string) error
}

// a2aFace is scenario 7: the A2A face's overhead against the REST API on
// the same work, one echo turn of a new continuable spawn child answered
// once it completed, for 1, 16 and 64 clients on the in-memory store, with
// the one-shot run of scenario 1 for reference, and the a2a-go SDK server
// around an echo agent (a2apeer.go) doing one SendMessage of a new task on
// the same machine in the same run.
func (b *bench) a2aFace(ctx context.Context) (*table, error) {
	t := &table{
		title: "7. A2A face: one echo turn of a new child, answered completed — A2A SendMessage against the REST calls that do the same, and against the a2a-go SDK server",
		head:  []string{"clients", "path", "turns", "turns/s", "p50", "p99", "REST ÷ this", "this ÷ SDK"},
	}
	var n atomic.Int64
	root := func(ctx context.Context, a *api, _ int) (string, error) { return a.createSession(ctx, "bench") }
	none := func(context.Context, *api, int) (string, error) { return "", nil }
	paths := []a2aPath{
		{"REST: POST /v1/subagents, GET /v1/tasks/{id}?wait", root, func(ctx context.Context, a *api, root string) error {
			var started struct{ ChildID, TaskID string }
			body := map[string]any{"provider": "spawn", "parentSessionId": root, "label": "bench", "prompt": text("hello from the bench")}
			if err := a.call(ctx, http.MethodPost, "/v1/subagents", body, http.StatusCreated, &started); err != nil {
				return err
			}
			var r runOut
			if err := a.call(ctx, http.MethodGet, "/v1/tasks/"+started.TaskID+"?wait=30", nil, http.StatusOK, &r); err != nil {
				return err
			}
			if r.State != "settled" || r.Result == nil || r.Result.StopReason != "completed" {
				return fmt.Errorf("task %s: state %q, result %+v: want a completed task", started.TaskID, r.State, r.Result)
			}
			return nil
		}},
		{"A2A JSON-RPC: SendMessage", none, sendMessage("/a2a/spawn", &n)},
		{"A2A HTTP+JSON: POST message:send", none, func(ctx context.Context, a *api, _ string) error {
			var answer a2aResult
			if err := a.call(ctx, http.MethodPost, "/a2a/spawn/rest/message:send", a2aSend(n.Add(1)), http.StatusOK, &answer); err != nil {
				return err
			}
			return answer.completed()
		}},
		{"REST one-shot: POST /v1/runs?wait=true", root, func(ctx context.Context, a *api, root string) error {
			_, err := a.createRun(ctx, root, true)
			return err
		}},
	}
	peer := a2aPath{"a2a-go SDK server: SendMessage", none, sendMessage("/a2a", &n)}
	for _, clients := range []int{1, 16, 64} {
		sdk, err := b.a2aMeasurePeer(ctx, clients, peer)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", peer.name, err)
		}
		var rest float64
		for i, p := range paths {
			m, err := b.a2aMeasure(ctx, fmt.Sprintf("s7-%d-c%d", i, clients), clients, p)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			if i == 0 {
				rest = m.perSec()
			}
			t.add(fmt.Sprint(clients), p.name, fmt.Sprint(m.n), num(m.perSec()), ms(m.lat.pct(50)), ms(m.lat.pct(99)), ratio(rest, m.perSec()), ratio(m.perSec(), sdk.perSec()))
		}
		t.add(fmt.Sprint(clients), peer.name, fmt.Sprint(sdk.n), num(sdk.perSec()), ms(sdk.lat.pct(50)), ms(sdk.lat.pct(99)), ratio(rest, sdk.perSec()), ratio(sdk.perSec(), sdk.perSec()))
	}
	t.note("Each client asks for turns back to back for %s on a fresh service (in-memory store, echo model) per row, after one warm-up turn. An A2A turn is a new context: the face starts a continuable child under the tenant's a2a root session and answers the task once it completed, which is what the REST row does in two calls; the one-shot row is scenario 1's run, which writes less (no continuable descriptor, no resident agent).", b.opts.duration)
	t.note("a2a-go SDK server: github.com/a2aproject/a2a-go/v2 at the version go.mod pins, its default request handler (in-memory task store and event queues) over JSON-RPC around an echo agent that answers each message with one artifact and completes, in a process of its own (the bench executable's baseline subprocess, at /a2a); driven by the same clients with the same SendMessage as the face's row. It keeps no log, no durable state and no lifecycle events.")
	t.note("REST ÷ this > 1 means the REST calls do that many times more turns per second than the path of the row; this ÷ SDK > 1 means the row does that many times more than the SDK server.")
	return t, nil
}

// sendMessage is the turn of a JSON-RPC SendMessage to endpoint that opens
// a new context, answered once its task completed; n numbers the requests.
func sendMessage(endpoint string, n *atomic.Int64) func(ctx context.Context, a *api, _ string) error {
	return func(ctx context.Context, a *api, _ string) error {
		var answer struct {
			Result a2aResult `json:"result"`
			Error  any       `json:"error"`
		}
		body := map[string]any{"jsonrpc": "2.0", "id": n.Add(1), "method": "SendMessage", "params": a2aSend(n.Add(1))}
		if err := a.call(ctx, http.MethodPost, endpoint, body, http.StatusOK, &answer); err != nil {
			return err
		}
		if answer.Error != nil {
			return fmt.Errorf("SendMessage: %v", answer.Error)
		}
		return answer.Result.completed()
	}
}

// a2aSend is the params of a SendMessage that opens a new context.
func a2aSend(n int64) map[string]any {
	return map[string]any{"message": map[string]any{
		"messageId": fmt.Sprintf("bench-%d", n), "role": "ROLE_USER",
		"parts": []map[string]string{{"text": "hello from the bench"}},
	}}
}

// a2aResult is a SendMessage answer: a StreamResponse holding the task.
type a2aResult struct {
	Task *struct {
		ID     string `json:"id"`
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	} `json:"task"`
}

func (r a2aResult) completed() error {
	if r.Task == nil || r.Task.Status.State != "TASK_STATE_COMPLETED" {
		return fmt.Errorf("SendMessage answered %+v, want a completed task", r.Task)
	}
	return nil
}

// a2aMeasurePeer measures path p with clients concurrent clients against
// a fresh SDK peer (the baseline subprocess's /a2a).
func (b *bench) a2aMeasurePeer(ctx context.Context, clients int, p a2aPath) (_ measured, err error) {
	peer, err := b.startBaseline(ctx)
	if err != nil {
		return measured{}, err
	}
	defer func() { err = errors.Join(err, peer.stop()) }()
	a := newAPI(peer.base, clients+4)
	defer a.close()
	return b.a2aDrive(ctx, a, clients, p)
}

// a2aMeasure measures path p with clients concurrent clients on a fresh
// service.
func (b *bench) a2aMeasure(ctx context.Context, name string, clients int, p a2aPath) (_ measured, err error) {
	var m measured
	svc, err := b.startService(ctx, name, "")
	if err != nil {
		return m, err
	}
	defer func() { err = errors.Join(err, b.stopService(svc)) }()
	a := newAPI(svc.base, clients+4)
	defer a.close()
	return b.a2aDrive(ctx, a, clients, p)
}

// a2aDrive sets up clients concurrent clients of path p on a, warms each
// up with one turn, then measures turns back to back.
func (b *bench) a2aDrive(ctx context.Context, a *api, clients int, p a2aPath) (measured, error) {
	roots := make([]string, clients)
	for i := range roots {
		var err error
		if roots[i], err = p.setup(ctx, a, i); err != nil {
			return measured{}, err
		}
		if err := p.turn(ctx, a, roots[i]); err != nil {
			return measured{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	m, err := b.measure(ctx, clients, b.opts.duration, "", func(ctx context.Context, i int) (time.Duration, error) {
		t0 := time.Now()
		err := p.turn(ctx, a, roots[i])
		return time.Since(t0), err
	})
	if err != nil {
		return m, err
	}
	b.log.Info("a2a face", slog.String("path", p.name), slog.Int("clients", clients), slog.Int("turns", m.n), slog.String("turns/s", num(m.perSec())))
	return m, nil
}
