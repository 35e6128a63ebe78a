package a2a

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"go.opentelemetry.io/otel/trace"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/netguard"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// A one-shot run is one message/stream: the remote's artifact text is
// journaled as assistant chunks between the turn's start and end, and is
// the run's result.
func TestRun_StreamsTheRemoteTaskIntoTheChildLog(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	r := start(t, p, "echo hello there")
	res := result(t, r)
	if res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "echo: hello there" {
		t.Fatalf("result = %+v, want completed with the echo", res)
	}
	text, types := logText(t, b.store, r.ChildID())
	if text != "echo: hello there" {
		t.Fatalf("log text = %q", text)
	}
	want := []string{sessionlog.EventTurnStart, sessionlog.EventUserMessage, sessionlog.EventDescriptor, sessionlog.EventStepStart}
	if !slices.Equal(types[:4], want) {
		t.Fatalf("log opens with %v, want %v", types[:4], want)
	}
	tail := []string{sessionlog.EventAssistantMessage, sessionlog.EventStepEnd, sessionlog.EventTurnEnd}
	if !slices.Equal(types[len(types)-3:], tail) {
		t.Fatalf("log ends with %v, want %v", types[len(types)-3:], tail)
	}
	if !slices.Contains(types, sessionlog.EventA2ATask) {
		t.Fatalf("log %v records no remote task", types)
	}
	out := sessionlog.OutcomeOf(events(t, b.store, r.ChildID()))
	if model.Text(out.Output) != "echo: hello there" {
		t.Fatalf("log outcome = %+v", out)
	}
	calls, _, _ := rm.received()
	if !slices.Equal(calls, []string{"card", "SendStreamingMessage"}) {
		t.Fatalf("remote received %v", calls)
	}
}

// The bearer token goes on every call, the card fetch included, and so
// does the caller's traceparent.
func TestRun_BearerAndTraceparentOnEveryCall(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	r, err := p.Start(ctx, request("hang"))
	if err != nil {
		t.Fatal(err)
	}
	id := <-cancelled(t, rm, b, r)
	if id == "" {
		t.Fatal("no task cancelled")
	}
	dispose(t, r)
	calls, auths, tps := rm.received()
	if !slices.Equal(calls, []string{"card", "SendStreamingMessage", "CancelTask"}) {
		t.Fatalf("remote received %v", calls)
	}
	for i, a := range auths {
		if a != "Bearer "+token {
			t.Errorf("call %s had Authorization %q", calls[i], a)
		}
		if !strings.Contains(tps[i], tid.String()) {
			t.Errorf("call %s had traceparent %q, want trace %s", calls[i], tps[i], tid)
		}
	}
}

// cancelled cancels r and returns the channel on which the remote reports
// the task it was asked to cancel.
func cancelled(t *testing.T, rm *remote, b *bundle, r subagent.Run) <-chan sdk.TaskID {
	t.Helper()
	// Cancel once the remote task is known and working: its first chunk
	// is in the log.
	waitForEvent(t, b.store, r.ChildID(), func(e store.Event) bool {
		d, err := sessionlog.Decode[sessionlog.ChunkData](e)
		return e.Type == sessionlog.EventAssistantChunk && err == nil && d.Chunk.Text == "working"
	})
	r.Cancel()
	out := make(chan sdk.TaskID, 1)
	select {
	case id := <-rm.Cancelled():
		out <- id
	case <-time.After(wait):
		t.Fatal("the remote received no tasks/cancel")
	}
	return out
}

func dispose(t *testing.T, r subagent.Run) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := r.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
}

// A wrong token fails the card fetch: the start is refused as
// AGENT_UNAVAILABLE and nothing is created.
func TestStart_WrongTokenIsRefusedAtTheCard(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	st := memstore.New()
	p, err := New(config.ProviderConfig{Name: "remote", Type: config.TypeA2A, URL: rm.cardURL, BearerEnv: "TEST_A2A_WRONG"},
		Deps{Store: st, Logger: slog.New(slog.DiscardHandler), AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Start(context.Background(), request("echo x"))
	var se *subagent.Error
	if !errors.As(err, &se) || se.Code != subagent.EAgentUnavailable || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Start = %v, want AGENT_UNAVAILABLE naming the 401", err)
	}
	// Readiness asks again at once: the failure is the answer for a
	// while, without another fetch.
	if err := p.WaitProbe(context.Background()); !errors.As(err, &se) || se.Code != subagent.EAgentUnavailable {
		t.Fatalf("WaitProbe = %v, want AGENT_UNAVAILABLE", err)
	}
	calls, _, _ := rm.received()
	if !slices.Equal(calls, []string{"card"}) {
		t.Fatalf("remote received %v, want only the card fetch", calls)
	}
}

// WaitProbe fetches the card once: a provider that reaches its agent is
// ready, and later runs do not fetch it again.
func TestWaitProbe_FetchesTheCardOnce(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, _ := setup(t, rm)
	for range 2 {
		if err := p.WaitProbe(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	result(t, start(t, p, "echo x"))
	if calls, _, _ := rm.received(); !slices.Equal(calls, []string{"card", "SendStreamingMessage"}) {
		t.Fatalf("remote received %v", calls)
	}
}

// Cancel settles the run aborted at once and sends tasks/cancel for the
// hanging remote task.
func TestRun_CancelSendsTasksCancel(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	r := start(t, p, "hang")
	<-cancelled(t, rm, b, r)
	res := result(t, r)
	if res.StopReason != subagent.StopAborted || model.Text(res.Output) != "working" {
		t.Fatalf("result = %+v, want aborted with the text so far", res)
	}
	dispose(t, r)
	out := sessionlog.OutcomeOf(events(t, b.store, r.ChildID()))
	if out.End == nil || out.End.Reason.Kind != sessionlog.ReasonAborted {
		t.Fatalf("log outcome %+v, want aborted", out)
	}
}

// The remote's failure states map to stop reasons, with its message as
// the diagnostic.
func TestRun_RemoteFailuresSettleError(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, _ := setup(t, rm)
	for prompt, want := range map[string]string{
		"fail the disk is full":   "the remote A2A agent's task failed: the disk is full",
		"input which file, then?": "the remote A2A agent needs input (input-required), which subagentd does not relay to it: which file, then?",
	} {
		res := result(t, start(t, p, prompt))
		if res.StopReason != subagent.StopError || res.Diagnostic != want {
			t.Errorf("%q settled %+v, want error %q", prompt, res, want)
		}
	}
}

// A stream lost before the task ended reattaches with SubscribeToTask:
// the text after the drop reaches the log, once.
func TestRun_LostStreamResubscribes(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	r := start(t, p, "drop")
	res := result(t, r)
	if res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "part1part2" {
		t.Fatalf("result = %+v, want completed with both parts", res)
	}
	if text, _ := logText(t, b.store, r.ChildID()); text != "part1part2" {
		t.Fatalf("log text = %q", text)
	}
	calls, _, _ := rm.received()
	if !slices.Contains(calls, "SubscribeToTask") {
		t.Fatalf("remote received %v, want a SubscribeToTask", calls)
	}
}

// A remote whose card says streaming:false is driven with message/send
// and tasks/get.
func TestRun_NonStreamingRemoteIsPolled(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, false)
	p, b := setup(t, rm)
	r := start(t, p, "echo polled")
	res := result(t, r)
	if res.StopReason != subagent.StopCompleted || model.Text(res.Output) != "echo: polled" {
		t.Fatalf("result = %+v, want completed with the echo", res)
	}
	if text, _ := logText(t, b.store, r.ChildID()); text != "echo: polled" {
		t.Fatalf("log text = %q", text)
	}
	calls, _, _ := rm.received()
	if slices.Contains(calls, "SendStreamingMessage") || !slices.Contains(calls, "SendMessage") {
		t.Fatalf("remote received %v, want message/send without streaming", calls)
	}
}

// A loopback card URL is refused without AllowPrivate, at construction
// for a literal address and at dial time for a name.
func TestNew_PrivateURLIsRefusedWithoutAllowPrivate(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	deps := Deps{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)}
	_, err := New(config.ProviderConfig{Name: "remote", Type: config.TypeA2A, URL: rm.cardURL}, deps)
	if !errors.Is(err, netguard.ErrRefused) || !strings.Contains(err.Error(), allowSetting) {
		t.Fatalf("New with %s = %v, want refused naming %s", rm.cardURL, err, allowSetting)
	}
	// A name is checked once resolved: localhost is refused by name, and
	// any other name that resolves to loopback at dial time.
	for _, u := range []string{strings.Replace(rm.cardURL, "127.0.0.1", "localhost", 1), "http://[::1]:9/card.json", "http://10.0.0.1/card"} {
		if _, err := New(config.ProviderConfig{Name: "remote", Type: config.TypeA2A, URL: u}, deps); !errors.Is(err, netguard.ErrRefused) {
			t.Errorf("New with %s = %v, want refused", u, err)
		}
	}
	p, err := New(config.ProviderConfig{Name: "remote", Type: config.TypeA2A, URL: "http://dial-guard.invalid/card"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	// The dial guard itself: the provider's client refuses loopback.
	_, err = p.hc.Get(rm.cardURL)
	if !errors.Is(err, netguard.ErrRefused) {
		t.Fatalf("GET %s through the provider's client = %v, want refused", rm.cardURL, err)
	}
	if calls, _, _ := rm.received(); len(calls) != 0 {
		t.Fatalf("the remote received %v", calls)
	}
}

// A resubscription that replays the task from its start (as subagentd's
// own A2A face does) logs none of the replayed text again: only what the
// log does not hold yet.
func TestAddArtifact_ReplayIsNotLoggedTwice(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	r := newRun(context.Background(), p, nil, "child-1")
	if err := r.OpenLog(p.childSession("child-1", request("x")), []model.Block{model.TextBlock("x")}, nil); err != nil {
		t.Fatal(err)
	}
	a := func(text string) *sdk.Artifact {
		return &sdk.Artifact{ID: "out", Parts: []*sdk.Part{sdk.NewTextPart(text)}}
	}
	// The first stream: "ab", "cd", then lost.
	r.f.addArtifact(a("ab"), false)
	r.f.addArtifact(a("cd"), true)
	// The replay from the start, then new text; then a second replay
	// that stops short of what was logged, and a last one that goes on
	// in another artifact.
	r.f.addArtifact(a("ab"), false)
	r.f.addArtifact(a("cd"), true)
	r.f.addArtifact(a("ef"), true)
	r.f.addArtifact(a("abc"), false)
	r.f.addArtifact(a("def"), true)
	r.f.addArtifact(&sdk.Artifact{ID: "second", Parts: []*sdk.Part{sdk.NewTextPart("!")}}, false)
	if text, _ := logText(t, b.store, "child-1"); text != "abcdef!" {
		t.Fatalf("log text = %q, want abcdef!", text)
	}
	if got := model.Text(r.Output()); got != "abcdef!" {
		t.Fatalf("output = %q", got)
	}
}

// A run cancelled as it starts — its request ended during Start — never
// sends its message.
func TestStart_CancelledRequestSendsNothing(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	// The card is fetched first, so that the cancellation meets the
	// message, not the card.
	if _, err := p.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := newRun(context.Background(), p, p.conn, "child-1")
	if err := r.OpenLog(p.childSession("child-1", request("echo x")), []model.Block{model.TextBlock("echo x")}, nil); err != nil {
		t.Fatal(err)
	}
	r.Cancel()
	r.drive([]model.Block{model.TextBlock("echo x")})
	dispose(t, r)
	if res := result(t, r); res.StopReason != subagent.StopAborted {
		t.Fatalf("result %+v, want aborted", res)
	}
	if calls, _, _ := rm.received(); !slices.Equal(calls, []string{"card"}) {
		t.Fatalf("remote received %v, want only the card", calls)
	}
	if out := sessionlog.OutcomeOf(events(t, b.store, "child-1")); out.End == nil || out.End.Reason.Kind != sessionlog.ReasonAborted {
		t.Fatalf("log outcome %+v, want aborted", out)
	}
}

// A run whose remote agent refuses the message settles error at once,
// and disposing it waits for nothing: no task was named, no cancel is
// owed.
func TestRun_RefusedMessageSettlesAndDisposesAtOnce(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, _ := setup(t, rm)
	if _, err := p.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The card was fetched; from now on the remote refuses the token.
	rm.mu.Lock()
	rm.refuse = true
	rm.mu.Unlock()
	r := start(t, p, "echo x")
	res := result(t, r)
	if res.StopReason != subagent.StopError || !strings.Contains(res.Diagnostic, "before it named its task") {
		t.Fatalf("result %+v, want an error naming the refusal", res)
	}
	began := time.Now()
	dispose(t, r)
	if d := time.Since(began); d >= cancelGrace {
		t.Fatalf("Dispose took %v, as long as the cancel grace", d)
	}
}

// A caller waiting for the card fetch under way — a readiness probe
// while the start-up fetch hangs — gives up with its own context, never
// waiting out the fetch.
func TestWaitProbe_WaitsForTheFetchUnderWayOnlyAsLongAsItsContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		http.NotFound(w, r)
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	p, err := New(config.ProviderConfig{Name: "slow", Type: config.TypeA2A, URL: hang.URL + "/card.json"},
		Deps{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler), AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { first <- p.WaitProbe(context.Background()) }()
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- p.WaitProbe(ctx) }()
	cancel()
	select {
	case err := <-waited:
		if err == nil || !strings.Contains(err.Error(), "still being fetched") {
			t.Fatalf("WaitProbe = %v, want its context's end", err)
		}
	case <-time.After(wait):
		t.Fatal("a caller that gave up waited for the fetch under way")
	}
	select {
	case err := <-first:
		t.Fatalf("the fetch ended (%v) before the agent answered", err)
	default:
	}
}

// deadlineAt tells every session the deadline at.
type deadlineAt time.Time

func (d deadlineAt) Deadline(context.Context, string) (time.Time, error) { return time.Time(d), nil }

// A run whose tree's deadline passes while its remote task hangs settles
// deadline_exceeded, as an in-process turn does, and sends tasks/cancel.
func TestRun_DeadlineEndsTheTask(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	p.deadlines = deadlineAt(time.Now().Add(time.Second))
	r := start(t, p, "hang")
	res := result(t, r)
	if res.StopReason != subagent.StopDeadlineExceeded || !strings.Contains(res.Diagnostic, "deadline") {
		t.Fatalf("result = %+v, want deadline_exceeded", res)
	}
	select {
	case <-rm.Cancelled():
	case <-time.After(wait):
		t.Fatal("the remote received no tasks/cancel")
	}
	dispose(t, r)
	out := sessionlog.OutcomeOf(events(t, b.store, r.ChildID()))
	if out.End == nil || out.End.Reason.Kind != sessionlog.ReasonDeadlineExceeded {
		t.Fatalf("log outcome %+v, want deadline_exceeded", out)
	}
}

// The child's header keeps the request's narrowing of the tree's limits,
// as an in-process or ACP child's does: the deadline in force at the child
// (what its remote task is held to) is read from it.
func TestStart_ChildHeaderKeepsTheRequestsLimits(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, true)
	p, b := setup(t, rm)
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	req := request("echo limits")
	req.Limits = store.Limits{Deadline: &deadline, TokenBudget: new(int64(50))}
	r := startRequest(t, p, req)
	result(t, r)
	h, err := b.store.GetSession(t.Context(), r.ChildID())
	if err != nil {
		t.Fatal(err)
	}
	if h.Limits.Deadline == nil || !h.Limits.Deadline.Equal(deadline) || h.Limits.TokenBudget == nil || *h.Limits.TokenBudget != 50 {
		t.Fatalf("child header limits %+v, want the request's deadline %v and tokenBudget 50", h.Limits, deadline)
	}
}
