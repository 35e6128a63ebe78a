package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// gatedProvider is a fakeProvider whose Start, before it creates anything,
// waits until the test opens the gate or Start's context ends; in the
// latter case it publishes nothing and returns the context's error, as a
// provider rolling back a half-established child does (R22).
type gatedProvider struct {
	*fakeProvider
	entered chan context.Context // Start's context, once Start waits
	gate    chan struct{}        // closed by open: establish the child
	opened  sync.Once
	aborted chan error // Start's error when its context ended
}

// open lets Start establish the child.
func (p *gatedProvider) open() { p.opened.Do(func() { close(p.gate) }) }

// registerGated registers a local gatedProvider named name.
func (b *testBundle) registerGated(t *testing.T, name string) *gatedProvider {
	t.Helper()
	p := &gatedProvider{
		fakeProvider: &fakeProvider{name: name, caps: allCaps(), local: true, st: b.st, runs: map[string]*fakeRun{}, started: make(chan *fakeRun, 100)},
		entered:      make(chan context.Context, 1),
		gate:         make(chan struct{}),
		aborted:      make(chan error, 1),
	}
	if err := b.svc.Register(t.Context(), p); err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	t.Cleanup(p.open) // a failed test must not leave Start waiting
	return p
}

func (p *gatedProvider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	p.entered <- ctx
	select {
	case <-p.gate:
		return p.fakeProvider.Start(ctx, req)
	case <-ctx.Done():
		err := fmt.Errorf("establish %s child: %w", p.name, ctx.Err())
		p.aborted <- err
		return nil, err
	}
}

// abandon validates c against the spec and sends it from another goroutine
// under a context that cancel ends, as a client that goes away does. ended
// receives the client's error once the request is over (an error too when
// the server answered, which the tests here never expect).
func (b *testBundle) abandon(t *testing.T, c call) (cancel context.CancelFunc, ended <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	c.ctx = ctx
	req := b.request(t, c)
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	probe := req.Clone(ctx)
	probe.Body = io.NopCloser(bytes.NewReader(body))
	validateRequest(t, probe, body, false)
	req.Body = io.NopCloser(bytes.NewReader(body))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("answered %d: %s", resp.StatusCode, data)
		}
		errc <- err
	}()
	return cancel, errc
}

// clientGone cancels an abandoned request and checks that it ended without
// an answer.
func clientGone(t *testing.T, cancel context.CancelFunc, ended <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned request ended with %v, want the client's cancellation", err)
		}
	case <-time.After(streamTimeout):
		t.Fatal("abandoned request did not end")
	}
}

// eventually fails t unless cond holds within streamTimeout, checking it
// on a short tick.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(streamTimeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s did not happen within %s", what, streamTimeout)
		}
	}
}

// metricSum sums the samples of the counter or gauge name whose labels
// include labels.
func (b *testBundle) metricSum(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := b.srv.registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// awaitHandled waits until the server finished n POST /v1/runs requests
// (whatever their status): the middleware counts a request once its
// handler returned.
func (b *testBundle) awaitHandled(t *testing.T, n float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%v finished POST /v1/runs", n), func() bool {
		return b.metricSum(t, "subagentd_http_requests_total", map[string]string{"method": http.MethodPost, "route": "/v1/runs"}) == n
	})
}

// awaitLifecycle waits, on the store's wake-ups, until the lifecycle log
// holds an event of type typ for a run under parent, and returns the
// first.
func (b *testBundle) awaitLifecycle(t *testing.T, typ, parent string) store.LifecycleEvent {
	t.Helper()
	wake, stop := b.st.Subscribe(store.LifecycleTopic)
	defer stop()
	deadline := time.After(streamTimeout)
	for {
		evs, err := b.st.Lifecycle(t.Context(), store.LifecycleFilter{ParentID: parent, Types: []string{typ}, Limit: 1})
		if err != nil {
			t.Fatalf("read lifecycle: %v", err)
		}
		if len(evs) == 1 {
			return evs[0]
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("no %s under %s within %s", typ, parent, streamTimeout)
		}
	}
}

// runGoroutines are frames that a goroutine serving or running a run would
// still show if it leaked.
var runGoroutines = []string{"http.(*Server).createRun", "http.(*Server).untilSettled", "subagent.(*RunHandle)"}

// leftovers returns the stacks of goroutines still in runGoroutines.
func leftovers() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, fn := range runGoroutines {
			if strings.Contains(g, fn) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// closeIdle drops the test clients' idle keep-alive connections, so that
// goroutine counts compare like with like.
func closeIdle() { http.DefaultTransport.(*http.Transport).CloseIdleConnections() }

// TestCreateRun_DisconnectWithoutCancel: a client closing POST
// /v1/runs?wait=true without onDisconnect neither aborts nor cancels the
// run — whether it leaves while the child is being established or while it
// waits for the result — and nothing leaks: the run settles normally, is
// disposed, and every goroutine it used ends.
func TestCreateRun_DisconnectWithoutCancel(t *testing.T) {
	for _, tc := range []struct {
		name string
		// beforeReady closes the request while the provider establishes the
		// child, else after subagent/start is recorded.
		beforeReady bool
	}{
		{"while establishing", true},
		{"while waiting", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			p := b.registerGated(t, "spawn")
			parent := b.rootSession(t)
			closeIdle()
			base := runtime.NumGoroutine()

			cancel, ended := b.abandon(t, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
				"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("q"),
			}})
			var startCtx context.Context
			select {
			case startCtx = <-p.entered:
			case <-time.After(streamTimeout):
				t.Fatal("the provider was not asked to start")
			}
			if startCtx.Done() != nil {
				t.Fatal("the provider's start context can be cancelled")
			}
			if tc.beforeReady {
				clientGone(t, cancel, ended)
			}
			p.open()
			start := b.awaitLifecycle(t, subagent.EventStart, parent)
			if !tc.beforeReady {
				clientGone(t, cancel, ended)
			}
			b.awaitHandled(t, 1)
			fr := <-p.started
			select {
			case <-fr.cancelled:
				t.Fatal("the run was cancelled by the client's disconnect")
			default:
			}
			var run runJSON
			b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + start.RunID}).decode(t, &run)
			if run.State != store.StateRunning || run.ChildSessionID != fr.childID {
				t.Fatalf("run after the disconnect = %+v", run)
			}
			if len(leftovers()) == 0 {
				t.Fatal("the leak check does not see the running run's goroutines")
			}

			fr.complete(t, "late answer")
			b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + start.RunID + "?wait=10"}).decode(t, &run)
			if run.State != store.StateSettled || run.Result == nil || run.Result.StopReason != subagent.StopCompleted ||
				string(run.Result.Output) != `[{"type":"text","text":"late answer"}]` {
				t.Fatalf("settled run = %+v result %+v", run, run.Result)
			}
			b.want(t, http.StatusNoContent, call{method: http.MethodDelete, path: "/v1/runs/" + start.RunID})
			if _, ok := b.svc.Run(t.Context(), start.RunID); ok {
				t.Fatal("the disposed run still has a live handle")
			}

			closeIdle()
			eventually(t, "goroutines back to the baseline", func() bool {
				return runtime.NumGoroutine() <= base && len(leftovers()) == 0
			})
		})
	}
}

// TestCreateRun_R21_R22_OnDisconnectCancelBeforeReady: with onDisconnect
// "cancel", a client closing the request while the provider still
// establishes the child aborts the start before publication: the
// provider's start context ends, and nothing is published — no run, no
// subagent/start, no child session.
func TestCreateRun_R21_R22_OnDisconnectCancelBeforeReady(t *testing.T) {
	b := setup(t)
	p := b.registerGated(t, "spawn")
	parent := b.rootSession(t)
	cancel, ended := b.abandon(t, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
		"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("q"), "onDisconnect": "cancel",
	}})
	var startCtx context.Context
	select {
	case startCtx = <-p.entered:
	case <-time.After(streamTimeout):
		t.Fatal("the provider was not asked to start")
	}
	clientGone(t, cancel, ended)
	select {
	case err := <-p.aborted:
		if !errors.Is(err, context.Canceled) || !errors.Is(startCtx.Err(), context.Canceled) {
			t.Fatalf("start aborted with %v, context %v", err, startCtx.Err())
		}
	case <-time.After(streamTimeout):
		t.Fatal("the provider's start context did not end with the request")
	}
	b.awaitHandled(t, 1)

	ctx := t.Context()
	if runs, err := b.st.ListRuns(ctx, store.RunFilter{}); err != nil || len(runs) != 0 {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
	if evs, err := b.st.Lifecycle(ctx, store.LifecycleFilter{Types: []string{subagent.EventStart, subagent.EventEnd}}); err != nil || len(evs) != 0 {
		t.Fatalf("lifecycle = %+v, %v", evs, err)
	}
	if sessions, err := b.st.ListSessions(ctx, store.SessionFilter{}); err != nil || len(sessions) != 1 || sessions[0].ID != parent {
		t.Fatalf("sessions = %+v, %v", sessions, err)
	}
	var list runListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs?parentSessionId=" + parent}).decode(t, &list)
	if len(list.Runs) != 0 {
		t.Fatalf("runs over the API = %+v", list.Runs)
	}
}

// TestCreateRun_R23_OnDisconnectCancelAfterReady: with onDisconnect
// "cancel", a client closing the request once the child is published
// cancels the run, which stays published and settles aborted with its
// subagent/end.
func TestCreateRun_R23_OnDisconnectCancelAfterReady(t *testing.T) {
	b := setup(t)
	p := b.registerGated(t, "spawn")
	parent := b.rootSession(t)
	cancel, ended := b.abandon(t, call{method: http.MethodPost, path: "/v1/runs?wait=true", body: map[string]any{
		"provider": "spawn", "parentSessionId": parent, "prompt": textPrompt("q"), "onDisconnect": "cancel",
	}})
	p.open()
	start := b.awaitLifecycle(t, subagent.EventStart, parent)
	fr := <-p.started
	clientGone(t, cancel, ended)
	fr.waitCancelled(t)

	var run runJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/runs/" + start.RunID + "?wait=10"}).decode(t, &run)
	if run.State != store.StateSettled || run.Result == nil || run.Result.StopReason != subagent.StopAborted || run.ChildSessionID != fr.childID {
		t.Fatalf("run = %+v result %+v", run, run.Result)
	}
	end := b.awaitLifecycle(t, subagent.EventEnd, parent)
	var d lifecycleData
	if err := json.Unmarshal(end.Payload, &d); err != nil || end.RunID != start.RunID || d.StopReason != subagent.StopAborted {
		t.Fatalf("subagent/end = %+v (%v)", end, err)
	}
	b.awaitHandled(t, 1)
}
