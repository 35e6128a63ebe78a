package agent

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

func TestRegistry_RegisterUnregisterNames(t *testing.T) {
	t.Parallel()
	r := registry(t, "b", "a", "c")
	if err := r.Register(echoTool("a")); err == nil {
		t.Error("duplicate registration accepted")
	}
	if err := r.Register(Tool{Name: "x"}); err == nil {
		t.Error("tool without Run accepted")
	}
	r.Unregister("a")
	r.Unregister("unknown")
	if got := r.Names(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("names %v", got)
	}
}

// visible runs one step and returns the tool names the model was offered.
func visible(t *testing.T, global *Registry, f *Filter, local ...Tool) []string {
	t.Helper()
	m := scripted.New(scripted.Step{Text: "ok"})
	a := newAgent(t, nil, Config{Model: m, Global: global, Filter: f, Local: local})
	followup(t, a, "hi")
	waitIdle(t, a)
	return toolNames(m.Requests()[0].Tools)
}

func TestFilter_S1_6_Visibility(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		filter *Filter
		want   []string
	}{
		{"no filter", nil, []string{"read", "write", "shell"}},
		{"allow", &Filter{Allow: []string{"shell", "read"}}, []string{"read", "shell"}},
		{"deny", &Filter{Deny: []string{"write"}}, []string{"read", "shell"}},
		{"allow and deny intersect", &Filter{Allow: []string{"read", "write"}, Deny: []string{"write"}}, []string{"read"}},
		{"empty allow hides every global", &Filter{Allow: []string{}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := visible(t, registry(t, "read", "write", "shell"), tc.filter); !slices.Equal(got, tc.want) {
				t.Errorf("visible %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFilter_S1_6_LocalToolsAddedAfterFilteringAndShadow(t *testing.T) {
	t.Parallel()
	local := echoTool("write")
	local.Description = "local write"
	m := scripted.New(scripted.Step{ToolCalls: []model.ToolCall{{Name: "write"}}}, scripted.Step{Text: "ok"})
	a := newAgent(t, nil, Config{Model: m, Global: registry(t, "read", "write"), Filter: &Filter{Allow: []string{}},
		Local: []Tool{local, echoTool("report")}})
	followup(t, a, "hi")
	waitIdle(t, a)
	tools := m.Requests()[0].Tools
	if got := toolNames(tools); !slices.Equal(got, []string{"write", "report"}) || tools[0].Description != "local write" {
		t.Errorf("tools %+v", tools)
	}
	if res := ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult); res[0].IsError {
		t.Errorf("local tool result %+v", res[0])
	}
}

func TestFilter_S1_6_LiveRegistration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		filter *Filter
		want   []string
	}{
		{"deny-only admits later globals", &Filter{Deny: []string{"write"}}, []string{"read", "late"}},
		{"allow-list excludes later globals", &Filter{Allow: []string{"read"}}, []string{"read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			global := registry(t, "read", "write")
			m := scripted.New(scripted.Step{Text: "1"}, scripted.Step{Text: "2"})
			a := newAgent(t, nil, Config{Model: m, Global: global, Filter: tc.filter})
			followup(t, a, "one")
			waitIdle(t, a)
			if err := global.Register(echoTool("late")); err != nil {
				t.Fatal(err)
			}
			followup(t, a, "two")
			waitIdle(t, a)
			if got := toolNames(m.Requests()[1].Tools); !slices.Equal(got, tc.want) {
				t.Errorf("second request tools %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFilter_S1_6_ForgedCallToFilteredToolIsUnknown(t *testing.T) {
	t.Parallel()
	ran := false
	global := NewRegistry()
	if err := global.Register(Tool{Name: "secret", Run: func(context.Context, Call) ([]model.Block, error) {
		ran = true
		return nil, nil
	}}); err != nil {
		t.Fatal(err)
	}
	if err := global.Register(echoTool("read")); err != nil {
		t.Fatal(err)
	}
	m := scripted.New(scripted.Step{ToolCalls: []model.ToolCall{{Name: "secret"}}}, scripted.Step{Text: "ok"})
	a := newAgent(t, nil, Config{Model: m, Global: global, Filter: &Filter{Deny: []string{"secret"}}})
	followup(t, a, "hi")
	waitIdle(t, a)
	res := ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult)
	if ran || len(res) != 1 || !res[0].IsError || model.Text(res[0].Content) != "unknown tool secret" {
		t.Errorf("ran %v result %+v", ran, res)
	}
}

func TestFilter_S1_6_UnknownNamesRejectedBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		filter *Filter
		want   string
	}{
		{"unknown allow", &Filter{Allow: []string{"read", "nope"}}, `tools.restrict() names unknown global tool "nope"; known global tools: read, write`},
		{"unknown deny", &Filter{Deny: []string{"ghost"}}, `tools.restrict() names unknown global tool "ghost"; known global tools: read, write`},
		{"reserved run_code", &Filter{Allow: []string{RunCodeTool}}, `tools.restrict() names unknown global tool "run_code"; known global tools: read, write`},
		{"scope-local name", &Filter{Deny: []string{"report"}}, `tools.restrict() names unknown global tool "report"; known global tools: read, write`},
		{"empty filter", &Filter{}, "tool filter needs allow or deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newFakeStore()
			if err := st.CreateSession(context.Background(), store.Session{ID: "s"}); err != nil {
				t.Fatal(err)
			}
			_, err := New(context.Background(), Config{ID: "s", Store: st, Global: registry(t, "read", "write"),
				Filter: tc.filter, Local: []Tool{echoTool("report")}})
			if !errors.Is(err, ErrToolFilter) || err.Error() != tc.want {
				t.Errorf("err %v, want %q", err, tc.want)
			}
			if n := len(st.log("s")); n != 0 {
				t.Errorf("%d events written", n)
			}
		})
	}
}

func TestTool_PanicAndErrorBecomeErrorResults(t *testing.T) {
	t.Parallel()
	global := NewRegistry()
	for _, tool := range []Tool{
		{Name: "panics", Run: func(context.Context, Call) ([]model.Block, error) { panic("kaboom") }},
		{Name: "fails", Run: func(context.Context, Call) ([]model.Block, error) { return nil, errors.New("disk full") }},
	} {
		if err := global.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	m := scripted.New(scripted.Step{ToolCalls: []model.ToolCall{{Name: "panics"}, {Name: "fails"}, {Name: "fails", Arguments: "{bad"}}},
		scripted.Step{Text: "ok"})
	a := newAgent(t, nil, Config{Model: m, Global: global})
	followup(t, a, "hi")
	waitIdle(t, a)
	var got []string
	for _, r := range ofType[sessionlog.ToolResultData](t, a.Events(), sessionlog.EventToolResult) {
		if !r.IsError {
			t.Errorf("result %+v is not an error", r)
		}
		got = append(got, model.Text(r.Content))
	}
	want := []string{"tool panics failed", "disk full", "INVALID_ARGS: arguments are not valid JSON"}
	if !slices.Equal(got, want) {
		t.Errorf("results %q, want %q", got, want)
	}
}

// Sibling calls of concurrent tools in one response run at the same time
// (docs/seam.md §23: parallel delegations); each waits until every sibling
// has started, which only parallel execution can satisfy. Results still
// commit in the model's order, and a non-concurrent call runs on its own.
func TestTools_ConcurrentSiblingsRunInParallelResultsInOrder(t *testing.T) {
	t.Parallel()
	const n = 3
	var started sync.WaitGroup
	started.Add(n)
	barrier := Tool{Name: "delegate", Concurrent: true, Run: func(ctx context.Context, c Call) ([]model.Block, error) {
		started.Done()
		all := make(chan struct{})
		go func() { started.Wait(); close(all) }()
		select {
		case <-all:
			return text("done " + string(c.Arguments)), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}}
	global := NewRegistry()
	for _, tool := range []Tool{barrier, echoTool("plain")} {
		if err := global.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	var calls []model.ToolCall
	for i := range n {
		calls = append(calls, model.ToolCall{ID: fmt.Sprint("c", i), Name: "delegate", Arguments: fmt.Sprint(i)})
	}
	calls = append(calls, model.ToolCall{ID: "p", Name: "plain", Arguments: `"x"`})
	st := newFakeStore()
	a := newAgent(t, st, Config{Global: global, Model: scripted.New(scripted.Step{ToolCalls: calls}, scripted.Step{Text: "ok"})})
	followup(t, a, "go")
	waitIdle(t, a)
	var ids, texts []string
	for _, r := range ofType[sessionlog.ToolResultData](t, st.log("s"), sessionlog.EventToolResult) {
		ids, texts = append(ids, r.CallID), append(texts, model.Text(r.Content))
	}
	if want := []string{"c0", "c1", "c2", "p"}; !slices.Equal(ids, want) {
		t.Fatalf("results in order %v, want %v", ids, want)
	}
	if want := []string{"done 0", "done 1", "done 2", `plain ran with "x"`}; !slices.Equal(texts, want) {
		t.Fatalf("results %q, want %q", texts, want)
	}
	if got := turnEnds(t, st.log("s")); !slices.Equal(got, []string{sessionlog.ReasonCompleted}) {
		t.Fatalf("turn ends %v", got)
	}
}

// streamThenSignal is a model that streams one text delta, waits until
// appending is closed (the chunk writer took it), streams n-1 more, closes
// streamed once it handed them all over, then finishes.
type streamThenSignal struct {
	n                   int
	appending, streamed chan struct{}
}

func (m streamThenSignal) Stream(ctx context.Context, _ model.Request) iter.Seq2[model.Chunk, error] {
	return func(yield func(model.Chunk, error) bool) {
		for i := range m.n {
			if !yield(model.Chunk{Kind: model.ChunkText, Text: fmt.Sprint(i, " ")}, nil) {
				return
			}
			if i == 0 {
				<-m.appending
			}
		}
		close(m.streamed)
		yield(model.Chunk{Kind: model.ChunkFinish, FinishReason: model.FinishStop}, nil)
	}
}

// A model that streams for longer than the linger gets its first delta
// appended on its own; while that append is in flight, the deltas that
// arrive queue up and go to the store together: a slow store costs one
// commit per batch, not one per delta. Nothing is lost or reordered.
func TestStream_DeltasAreGroupCommittedWhileTheStoreIsBusy(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	m := streamThenSignal{n: 50, appending: make(chan struct{}), streamed: make(chan struct{})}
	var mu sync.Mutex
	var chunkAppends []int // deltas in each append that carries some
	first := true
	st.beforeAppend = func(evs []store.NewEvent) {
		n := 0
		for _, e := range evs {
			if e.Type == sessionlog.EventAssistantChunk {
				n++
			}
		}
		if n == 0 {
			return
		}
		mu.Lock()
		chunkAppends = append(chunkAppends, n)
		hold := first
		first = false
		mu.Unlock()
		if hold {
			close(m.appending)
			<-m.streamed // the store is busy until the model streamed all
		}
	}
	a := newAgent(t, st, Config{Model: m, ChunkLinger: time.Millisecond})
	followup(t, a, "go")
	waitIdle(t, a)
	var texts, want []string
	for i := range m.n {
		want = append(want, fmt.Sprint(i, " "))
	}
	for _, c := range ofType[sessionlog.ChunkData](t, st.log("s"), sessionlog.EventAssistantChunk) {
		if c.Chunk.Type == string(model.ChunkText) {
			texts = append(texts, c.Chunk.Text)
		}
	}
	if !slices.Equal(texts, want) {
		t.Fatalf("logged deltas %q, want %q", texts, want)
	}
	mu.Lock()
	defer mu.Unlock()
	// The first delta alone, then the ones that queued behind it, and the
	// finish chunk if it came after that drain (then with the step's end).
	total := 0
	for _, n := range chunkAppends {
		total += n
	}
	if total != m.n+1 || len(chunkAppends) > 3 || chunkAppends[0] != 1 {
		t.Fatalf("appends of %v deltas for %d: want the first alone, the rest grouped", chunkAppends, m.n+1)
	}
	checkSeqs(t, st.log("s"))
}

// A stream that queues maxChunkBatch deltas does not wait out the linger:
// the full batch is appended at once, and the model is never held for
// longer than that append. Nothing is lost or reordered.
func TestStream_AFullBatchDoesNotLinger(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	const n = 3*maxChunkBatch + 7
	m := streamThenSignal{n: n, appending: make(chan struct{}), streamed: make(chan struct{})}
	close(m.appending) // the model never waits
	// A linger of an hour: only a full batch is appended before the end.
	a := newAgent(t, st, Config{Model: m, ChunkLinger: time.Hour})
	followup(t, a, "go")
	waitIdle(t, a)
	var texts []string
	for _, c := range ofType[sessionlog.ChunkData](t, st.log("s"), sessionlog.EventAssistantChunk) {
		if c.Chunk.Type == string(model.ChunkText) {
			texts = append(texts, c.Chunk.Text)
		}
	}
	if len(texts) != n {
		t.Fatalf("logged %d deltas, want %d", len(texts), n)
	}
	for i, s := range texts {
		if s != fmt.Sprint(i, " ") {
			t.Fatalf("delta %d is %q", i, s)
		}
	}
	if ends := turnEnds(t, st.log("s")); !slices.Equal(ends, []string{sessionlog.ReasonCompleted}) {
		t.Fatalf("turn ends %v", ends)
	}
	checkSeqs(t, st.log("s"))
}

// When appending a delta fails, the turn fails as on any lost write, the
// deltas after it are dropped rather than queued without bound, and the
// stream is never blocked by them.
func TestStream_AFailedChunkAppendFailsTheTurn(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	m := streamThenSignal{n: 2 * maxChunkBatch, appending: make(chan struct{}), streamed: make(chan struct{})}
	first := true
	st.beforeAppend = func(evs []store.NewEvent) {
		fail := first && evs[0].Type == sessionlog.EventAssistantChunk
		st.setFail(fail)
		if fail {
			first = false
			close(m.appending)
		}
	}
	a := newAgent(t, st, Config{Model: m, ChunkLinger: time.Millisecond})
	followup(t, a, "go")
	waitIdle(t, a)
	log := st.log("s")
	if chunks := ofType[sessionlog.ChunkData](t, log, sessionlog.EventAssistantChunk); len(chunks) != 0 {
		t.Errorf("%d deltas logged after the failed append", len(chunks))
	}
	ends := ofType[sessionlog.TurnEndData](t, log, sessionlog.EventTurnEnd)
	if len(ends) != 1 || ends[0].Reason.Kind != sessionlog.ReasonError || ends[0].Reason.Message != logFailed {
		t.Fatalf("turn ends %+v, want one failed with %q", ends, logFailed)
	}
}
