package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/a2a/a2atest"
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

// remote is a2atest's scripted agent behind a guard that checks the
// bearer token of every request and records it, and drops the first
// message/stream of a drop task after its first chunk.
type remote struct {
	*a2atest.Agent
	cardURL string

	mu sync.Mutex
	// calls are the card fetches ("card") and JSON-RPC methods received,
	// in order; auths the Authorization header of each; traceparents the
	// traceparent header of each.
	calls        []string
	auths        []string
	traceparents []string
	// refuse answers every call 401, whatever its token.
	refuse bool
}

// newRemote starts a remote whose card says streaming.
func newRemote(t *testing.T, streaming bool) *remote {
	t.Helper()
	rm := &remote{Agent: a2atest.NewAgent()}
	rm.cardURL = a2atest.Serve(t, rm.Agent, a2atest.Options{Streaming: streaming, Wrap: rm.guard})
	return rm
}

// guard checks the bearer token of every request, records it, lets drop
// tasks go on at a SubscribeToTask, and drops the first message/stream of
// a drop task after its first chunk.
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
			rm.Resubscribed()
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
	p, err := New(config.ProviderConfig{Name: "remote", Type: config.TypeA2A, URL: rm.cardURL, BearerEnv: "TEST_A2A_TOKEN"},
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

// start starts a run of prompt and disposes it when the test ends.
func start(t *testing.T, p *Provider, prompt string) subagent.Run {
	t.Helper()
	return startRequest(t, p, request(prompt))
}

// startRequest starts a run of req and disposes it when the test ends.
func startRequest(t *testing.T, p *Provider, req subagent.ResolvedRequest) subagent.Run {
	t.Helper()
	r, err := p.Start(context.Background(), req)
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
