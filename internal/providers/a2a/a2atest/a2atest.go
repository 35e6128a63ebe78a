// Package a2atest is a scripted remote A2A agent, served by the a2a-go SDK
// on loopback, for the tests that drive subagentd's A2A provider: the
// provider's own (internal/providers/a2a) and the end-to-end ones of
// cmd/api. Only test code imports it.
package a2atest

import (
	"context"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// Agent is the remote's executor. It acts on the prompt's first word:
//
//	echo TEXT   streams "echo: " and TEXT as two artifact chunks, completes
//	hang        streams "working", then waits until the task is cancelled
//	fail TEXT   fails with TEXT as the status message
//	input TEXT  asks for input with TEXT as the status message; the message
//	            that answers it in the same task streams "answered: " and
//	            the answer's text as two chunks and completes the task
//	drop        streams "part1", then waits until Resubscribed is called,
//	            then streams "part2" and completes
//	gate TEXT   streams "before", then waits until the test closes Gate,
//	            then streams TEXT and completes
type Agent struct {
	// Gate holds gate tasks until the test closes it.
	Gate chan struct{}

	mu sync.Mutex
	// contexts are, per message executed, the context it named ("" for a
	// new one) and the context it ran in; tasks the task it ran in.
	contexts [][2]string
	tasks    []a2a.TaskID
	// cancels are closed by their task's tasks/cancel.
	cancels   map[a2a.TaskID]chan struct{}
	cancelled chan a2a.TaskID

	resubscribed chan struct{}
	resubOnce    sync.Once
}

// NewAgent returns an agent with its gate shut.
func NewAgent() *Agent {
	return &Agent{
		Gate:         make(chan struct{}),
		cancels:      map[a2a.TaskID]chan struct{}{},
		cancelled:    make(chan a2a.TaskID, 8),
		resubscribed: make(chan struct{}),
	}
}

// Seen returns, per message executed so far, the context it named and the
// one it ran in, and the task it ran in.
func (ag *Agent) Seen() (contexts [][2]string, tasks []a2a.TaskID) {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	return append([][2]string(nil), ag.contexts...), append([]a2a.TaskID(nil), ag.tasks...)
}

// Cancelled receives the task of each tasks/cancel, up to eight unread.
func (ag *Agent) Cancelled() <-chan a2a.TaskID { return ag.cancelled }

// Resubscribed lets drop tasks go on; a test's server calls it on a
// SubscribeToTask.
func (ag *Agent) Resubscribed() { ag.resubOnce.Do(func() { close(ag.resubscribed) }) }

// cancel returns the channel task's tasks/cancel closes.
func (ag *Agent) cancel(task a2a.TaskID) chan struct{} {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	ch := ag.cancels[task]
	if ch == nil {
		ch = make(chan struct{})
		ag.cancels[task] = ch
	}
	return ch
}

// Execute is the remote's agent.
func (ag *Agent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	var text strings.Builder
	for _, p := range ec.Message.Parts {
		text.WriteString(p.Text())
	}
	word, rest, _ := strings.Cut(text.String(), " ")
	ag.mu.Lock()
	ag.contexts = append(ag.contexts, [2]string{ec.Message.ContextID, ec.ContextID})
	ag.tasks = append(ag.tasks, ec.TaskID)
	ag.mu.Unlock()
	answering := ec.StoredTask != nil && ec.StoredTask.Status.State == a2a.TaskStateInputRequired
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		artifact := a2a.NewArtifactEvent(ec, a2a.NewTextPart(""))
		// send yields each chunk as an update of the artifact, stream the
		// artifact first.
		send := func(chunks ...string) bool {
			for _, c := range chunks {
				if !yield(a2a.NewArtifactUpdateEvent(ec, artifact.Artifact.ID, a2a.NewTextPart(c)), nil) {
					return false
				}
			}
			return true
		}
		stream := func(chunks ...string) bool { return yield(artifact, nil) && send(chunks...) }
		// await waits for ch, false if the task's context ends first.
		await := func(ch <-chan struct{}) bool {
			select {
			case <-ch:
				return true
			case <-ctx.Done():
				return false
			}
		}
		complete := func() { yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil) }
		switch {
		case answering:
			if stream("answered: ", text.String()) {
				complete()
			}
		case word == "echo":
			if stream("echo: ", rest) {
				complete()
			}
		case word == "hang":
			if stream("working") {
				await(ag.cancel(ec.TaskID))
			}
		case word == "fail":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateFailed, a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart(rest))), nil)
		case word == "input":
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart(rest))), nil)
		case word == "gate":
			if stream("before") && await(ag.Gate) && send(rest) {
				complete()
			}
		case word == "drop":
			if stream("part1") && await(ag.resubscribed) && send("part2") {
				complete()
			}
		}
	}
}

// Cancel is the remote's tasks/cancel.
func (ag *Agent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	ch := ag.cancel(ec.TaskID)
	ag.mu.Lock()
	select {
	case <-ch:
	default:
		close(ch)
	}
	ag.mu.Unlock()
	select {
	case ag.cancelled <- ec.TaskID:
	default:
	}
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// Options shape the server Serve starts.
type Options struct {
	// Streaming is what the agent card says of message/stream.
	Streaming bool
	// Wrap, if set, wraps the server's handler: a test's checks of the
	// requests, or its changes to the responses.
	Wrap func(http.Handler) http.Handler
}

// Serve serves ag on loopback until the test ends, its card at /card.json
// and JSON-RPC at /rpc, and returns the card's URL.
func Serve(t testing.TB, ag *Agent, opts Options) (cardURL string) {
	t.Helper()
	caps := a2a.AgentCapabilities{Streaming: opts.Streaming}
	mux := http.NewServeMux()
	var h http.Handler = mux
	if opts.Wrap != nil {
		h = opts.Wrap(mux)
	}
	srv := httptest.NewUnstartedServer(h)
	url := "http://" + srv.Listener.Addr().String()
	card := &a2a.AgentCard{
		Name: "test remote", Description: "echoes, waits, asks and fails", Version: "1",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(url+"/rpc", a2a.TransportProtocolJSONRPC)},
		Capabilities:        caps,
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
	}
	mux.Handle("GET /card.json", a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(ag, a2asrv.WithCapabilityChecks(&caps))))
	srv.Start()
	t.Cleanup(srv.Close)
	return url + "/card.json"
}
