package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// wait bounds every wait of the tests, generous for a loaded machine.
const wait = 60 * time.Second

const (
	parentID = "parent-1"
	token    = "remote-secret-token"
)

// TestMain sets the variables the providers' bearerEnv name: the right
// token, and a wrong one.
func TestMain(m *testing.M) {
	os.Setenv("TEST_A2A_TOKEN", token)
	os.Setenv("TEST_A2A_WRONG", "not-the-token")
	os.Exit(m.Run())
}

// remote is a remote A2A agent served by the a2a-go SDK on loopback. Its
// executor acts on the prompt's first word:
//
//	echo TEXT   streams "echo: " and TEXT as two artifact chunks, completes
//	hang        streams "working", then waits until the task is cancelled
//	fail TEXT   fails with TEXT as the status message
//	input TEXT  asks for input with TEXT; the message that answers it in
//	            the same task completes it with "answered: " and its text
//	drop        streams "part1", then waits for a resubscription (the test
//	            server drops the first stream after that chunk), then
//	            streams "part2" and completes
//	gate TEXT   streams "before", then waits until the test closes gate,
//	            then streams TEXT and completes
type remote struct {
	srv *httptest.Server

	mu sync.Mutex
	// calls are the card fetches ("card") and JSON-RPC methods received,
	// in order; auths the Authorization header of each; traceparents the
	// traceparent header of each.
	calls        []string
	auths        []string
	traceparents []string
	// cancels are closed by the task's tasks/cancel; resubscribed closes
	// on the first SubscribeToTask.
	cancels map[sdk.TaskID]chan struct{}
	// contexts are, per message executed, the context it named ("" for
	// a new one) and the context it ran in.
	contexts     [][2]string
	resubscribed chan struct{}
	resubOnce    sync.Once
	// gate holds gate tasks until closed.
	gate chan struct{}
	// refuse answers every call 401, whatever its token.
	refuse    bool
	cancelled chan sdk.TaskID
}

// newRemote starts a remote whose card says streaming.
func newRemote(t *testing.T, streaming bool) *remote {
	t.Helper()
	rm := &remote{cancels: map[sdk.TaskID]chan struct{}{}, resubscribed: make(chan struct{}), gate: make(chan struct{}), cancelled: make(chan sdk.TaskID, 8)}
	caps := sdk.AgentCapabilities{Streaming: streaming}
	handler := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(rm, a2asrv.WithCapabilityChecks(&caps)))
	mux := http.NewServeMux()
	rm.srv = httptest.NewServer(rm.guard(mux))
	card := &sdk.AgentCard{
		Name: "test remote", Description: "echoes", Version: "1",
		SupportedInterfaces: []*sdk.AgentInterface{sdk.NewAgentInterface(rm.srv.URL+"/rpc", sdk.TransportProtocolJSONRPC)},
		Capabilities:        caps,
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
	}
	mux.Handle("GET /card.json", a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", handler)
	t.Cleanup(rm.srv.Close)
	return rm
}

func (rm *remote) cardURL() string { return rm.srv.URL + "/card.json" }

// guard checks the bearer token of every request, records it, and drops
// the first message/stream of a drop task after its first chunk.
func (rm *remote) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := "card"
		var body []byte
		if r.Method == http.MethodPost {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var rpc struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(body, &rpc)
			call = rpc.Method
		}
		rm.mu.Lock()
		rm.calls = append(rm.calls, call)
		rm.auths = append(rm.auths, r.Header.Get("Authorization"))
		rm.traceparents = append(rm.traceparents, r.Header.Get("traceparent"))
		refuse := rm.refuse
		rm.mu.Unlock()
		if refuse || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if call == "SubscribeToTask" {
			rm.resubOnce.Do(func() { close(rm.resubscribed) })
		}
		if call == "SendStreamingMessage" && bytes.Contains(body, []byte(`"drop"`)) {
			next.ServeHTTP(&dropper{ResponseWriter: w, after: "part1"}, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// dropper aborts the response once it wrote an event holding after.
type dropper struct {
	http.ResponseWriter
	after string
}

func (d *dropper) Write(p []byte) (int, error) {
	n, err := d.ResponseWriter.Write(p)
	if bytes.Contains(p, []byte(d.after)) {
		http.NewResponseController(d.ResponseWriter).Flush()
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (d *dropper) Flush() { http.NewResponseController(d.ResponseWriter).Flush() }

// received returns the calls so far and their Authorization headers.
func (rm *remote) received() (calls, auths, traceparents []string) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return append([]string(nil), rm.calls...), append([]string(nil), rm.auths...), append([]string(nil), rm.traceparents...)
}

func (rm *remote) cancelChan(id sdk.TaskID) chan struct{} {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	ch := rm.cancels[id]
	if ch == nil {
		ch = make(chan struct{})
		rm.cancels[id] = ch
	}
	return ch
}

// Execute is the remote's agent.
func (rm *remote) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	text := ""
	for _, p := range ec.Message.Parts {
		text += p.Text()
	}
	word, rest, _ := strings.Cut(text, " ")
	rm.mu.Lock()
	rm.contexts = append(rm.contexts, [2]string{ec.Message.ContextID, ec.ContextID})
	rm.mu.Unlock()
	return func(yield func(sdk.Event, error) bool) {
		if ec.StoredTask == nil && !yield(sdk.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateWorking, nil), nil) {
			return
		}
		artifact := sdk.NewArtifactEvent(ec, sdk.NewTextPart(""))
		send := func(s string) bool {
			ev := sdk.NewArtifactUpdateEvent(ec, artifact.Artifact.ID, sdk.NewTextPart(s))
			return yield(ev, nil)
		}
		if ec.StoredTask != nil && ec.StoredTask.Status.State == sdk.TaskStateInputRequired {
			word, rest = "echo", "answered: "+text
		}
		switch word {
		case "echo":
			if !yield(artifact, nil) || !send("echo: ") || !send(rest) {
				return
			}
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCompleted, nil), nil)
		case "hang":
			if !yield(artifact, nil) || !send("working") {
				return
			}
			select {
			case <-rm.cancelChan(ec.TaskID):
			case <-ctx.Done():
			}
		case "fail":
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateFailed, sdk.NewMessage(sdk.MessageRoleAgent, sdk.NewTextPart(rest))), nil)
		case "input":
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateInputRequired, sdk.NewMessage(sdk.MessageRoleAgent, sdk.NewTextPart(rest))), nil)
		case "gate":
			if !yield(artifact, nil) || !send("before") {
				return
			}
			select {
			case <-rm.gate:
			case <-ctx.Done():
				return
			}
			if !send(rest) {
				return
			}
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCompleted, nil), nil)
		case "drop":
			if !yield(artifact, nil) || !send("part1") {
				return
			}
			select {
			case <-rm.resubscribed:
			case <-ctx.Done():
				return
			}
			if !send("part2") {
				return
			}
			yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCompleted, nil), nil)
		}
	}
}

// Cancel is the remote's tasks/cancel.
func (rm *remote) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[sdk.Event, error] {
	close(rm.cancelChan(ec.TaskID))
	rm.cancelled <- ec.TaskID
	return func(yield func(sdk.Event, error) bool) {
		yield(sdk.NewStatusUpdateEvent(ec, sdk.TaskStateCanceled, nil), nil)
	}
}

type bundle struct {
	store *memstore.Store
}

// setup returns a provider of rm and its store, holding the parent
// session.
func setup(t *testing.T, rm *remote) (*Provider, *bundle) {
	t.Helper()
	b := &bundle{store: memstore.New()}
	if err := b.store.CreateSession(context.Background(), store.Session{ID: parentID, Cwd: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	p, err := New(config.ProviderConfig{Name: "remote", Type: config.TypeA2A, URL: rm.cardURL(), BearerEnv: "TEST_A2A_TOKEN"},
		Deps{Store: b.store, Logger: slog.New(slog.DiscardHandler), AllowPrivate: true, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return p, b
}

func request(prompt string) subagent.ResolvedRequest {
	return subagent.ResolvedRequest{
		Request: subagent.Request{
			Label:  "task",
			Prompt: []model.Block{model.TextBlock(prompt)},
			Parent: subagent.Parent{Session: store.Session{ID: parentID}},
		},
		Descriptor: subagent.Descriptor{Mode: subagent.ModeOneShot, Provider: "remote", Label: "task"},
		ChildDepth: 1,
	}
}

// start starts a run and disposes it when the test ends.
func start(t *testing.T, p *Provider, prompt string) subagent.Run {
	t.Helper()
	r, err := p.Start(context.Background(), request(prompt))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := r.Dispose(ctx); err != nil {
			t.Errorf("Dispose: %v", err)
		}
	})
	return r
}

func result(t *testing.T, r subagent.Run) subagent.Result {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(wait):
		t.Fatal("the run did not settle")
	}
	res, err := r.Result()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func events(t *testing.T, st store.Store, sessionID string) []store.Event {
	t.Helper()
	evs, err := st.Events(context.Background(), sessionID, -1, 1000)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	return evs
}

// waitForEvent waits, on the store's wake-ups, until the session log holds
// an event that match accepts.
func waitForEvent(t *testing.T, st store.Store, sessionID string, match func(store.Event) bool) {
	t.Helper()
	woken, stop := st.Subscribe(store.SessionTopic(sessionID))
	defer stop()
	timeout := time.After(wait)
	for {
		for _, e := range events(t, st, sessionID) {
			if match(e) {
				return
			}
		}
		select {
		case <-woken:
		case <-timeout:
			t.Fatalf("no matching event in %s", sessionID)
		}
	}
}

// logText is the text the child log's assistant chunks hold, and its
// types in order.
func logText(t *testing.T, st store.Store, sessionID string) (text string, types []string) {
	t.Helper()
	for _, e := range events(t, st, sessionID) {
		types = append(types, e.Type)
		if e.Type != sessionlog.EventAssistantChunk {
			continue
		}
		d, err := sessionlog.Decode[sessionlog.ChunkData](e)
		if err != nil {
			t.Fatal(err)
		}
		if d.Chunk.Type == string(model.ChunkText) {
			text += d.Chunk.Text
		}
	}
	return text, types
}
