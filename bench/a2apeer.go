package main

import (
	"context"
	"iter"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// The A2A SDK peer of scenario 7: the a2a-go server at the version go.mod
// pins, as a team that wires the SDK around its own agent runs it — its
// default request handler with its in-memory task store and event queues,
// served over JSON-RPC — around an echo agent. It is mounted at /a2a in
// the baseline subprocess, so it runs in a process of its own, like the
// service.

// echoExecutor is the peer's agent: each message is a task that answers
// "echo: " and the message's text as one artifact, then completes.
type echoExecutor struct{}

func (echoExecutor) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	var text strings.Builder
	text.WriteString("echo: ")
	for _, p := range ec.Message.Parts {
		text.WriteString(p.Text())
	}
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		if !yield(a2a.NewArtifactEvent(ec, a2a.NewTextPart(text.String())), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (echoExecutor) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// a2aPeer is the SDK peer's JSON-RPC endpoint.
func a2aPeer() http.Handler {
	return a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(echoExecutor{}))
}
