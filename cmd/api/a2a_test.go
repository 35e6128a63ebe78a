package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/subagentd/subagentd/internal/pg/pgtest"
)

// The A2A face's tests drive /a2a of the wired process (the real router,
// guard and domain) with the a2a-go SDK's own client over real HTTP, over
// both bindings the cards offer.

// a2aToken is the bearer token of the tests' tenant.
const a2aToken = "a2a-client-token-0123456789"

// a2aTransports are the bindings each test runs over.
var a2aTransports = []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON}

// a2aClient resolves the card of provider at base and returns a client
// over transport that sends token (none when "").
func a2aClient(t *testing.T, base, provider string, transport a2a.TransportProtocol, token string) (*a2aclient.Client, *a2a.AgentCard) {
	t.Helper()
	card, err := agentcard.DefaultResolver.Resolve(t.Context(), base+"/a2a/"+provider)
	if err != nil {
		t.Fatalf("resolve the card of %s: %v", provider, err)
	}
	hc := &http.Client{Transport: http.DefaultTransport}
	if token != "" {
		hc.Transport = bearer{token: token, next: http.DefaultTransport}
	}
	c, err := a2aclient.NewFromCard(t.Context(), card,
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{transport}}),
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
	if err != nil {
		t.Fatalf("client over %s: %v", transport, err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c, card
}

// textMessage is a user message of text, in contextID and taskID when set.
func textMessage(text, contextID string, taskID a2a.TaskID) *a2a.SendMessageRequest {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
	m.ContextID, m.TaskID = contextID, taskID
	return &a2a.SendMessageRequest{Message: m}
}

// streamed is what a stream delivered.
type streamed struct {
	task     *a2a.Task // the first event
	text     string    // the artifact's text, appended in order
	final    a2a.TaskState
	statuses []a2a.TaskState
}

// collect reads events until the stream ends (or stop says so after an
// event), and checks each names the stream's task and context.
func collect(t *testing.T, events func(yield func(a2a.Event, error) bool), stop func(streamed) bool) streamed {
	t.Helper()
	var s streamed
	for ev, err := range events {
		if err != nil {
			t.Fatalf("stream: %v (after %+v)", err, s)
		}
		switch ev := ev.(type) {
		case *a2a.Task:
			if s.task != nil {
				t.Fatalf("a second Task event: %+v", ev)
			}
			s.task = ev
		case *a2a.TaskArtifactUpdateEvent:
			if s.task == nil || ev.TaskID != s.task.ID || ev.ContextID != s.task.ContextID {
				t.Fatalf("artifact update %+v does not follow its task %+v", ev, s.task)
			}
			if ev.Append != (s.text != "") {
				t.Fatalf("artifact update append=%v after text %q", ev.Append, s.text)
			}
			for _, p := range ev.Artifact.Parts {
				s.text += p.Text()
			}
		case *a2a.TaskStatusUpdateEvent:
			if s.task == nil || ev.TaskID != s.task.ID {
				t.Fatalf("status update %+v does not follow its task %+v", ev, s.task)
			}
			s.statuses = append(s.statuses, ev.Status.State)
			if ev.Status.State.Terminal() {
				s.final = ev.Status.State
			}
		default:
			t.Fatalf("unexpected event %T %+v", ev, ev)
		}
		if stop != nil && stop(s) {
			return s
		}
	}
	return s
}

// artifactText is the text of a task's artifacts.
func artifactText(task *a2a.Task) string {
	var b strings.Builder
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			b.WriteString(p.Text())
		}
	}
	return b.String()
}

// TestA2A_ConversationOverBothBindings streams a turn, continues its
// context with a second message, cancels a /sleep turn, and checks the
// refusals A2A defines, over JSON-RPC and HTTP+JSON.
func TestA2A_ConversationOverBothBindings(t *testing.T) {
	t.Parallel()
	base := wiredServer(t, map[string]string{"SUBAGENTD_TOKENS": "a2a:" + a2aToken})
	for _, tp := range a2aTransports {
		t.Run(string(tp), func(t *testing.T) {
			t.Parallel()
			c, card := a2aClient(t, base, "spawn", tp, a2aToken)
			if card.Name != "spawn" || !card.Capabilities.Streaming || !card.Capabilities.PushNotifications {
				t.Fatalf("card %+v", card)
			}
			if _, ok := card.SecuritySchemes["bearer"]; !ok || len(card.SecurityRequirements) != 1 {
				t.Fatalf("card security %+v %+v: want the bearer scheme", card.SecuritySchemes, card.SecurityRequirements)
			}
			if len(card.SupportedInterfaces) != 2 || card.SupportedInterfaces[0].ProtocolVersion != a2a.Version {
				t.Fatalf("card interfaces %+v", card.SupportedInterfaces)
			}

			// A streamed turn completes with the echo.
			first := collect(t, c.SendStreamingMessage(t.Context(), textMessage("hello over "+string(tp), "", "")), nil)
			if first.task == nil || first.task.ContextID == "" || first.task.Status.State != a2a.TaskStateWorking {
				t.Fatalf("first event %+v: want the working task", first.task)
			}
			if first.text != "echo: hello over "+string(tp) || first.final != a2a.TaskStateCompleted {
				t.Fatalf("streamed %q ending %s, want the echo, completed", first.text, first.final)
			}
			ctxID := first.task.ContextID

			// A second message in the context is a new task of the same child.
			res, err := c.SendMessage(t.Context(), textMessage("and again", ctxID, ""))
			if err != nil {
				t.Fatal(err)
			}
			second, ok := res.(*a2a.Task)
			if !ok || second.ContextID != ctxID || second.ID == first.task.ID || second.Status.State != a2a.TaskStateCompleted || artifactText(second) != "echo: and again" {
				t.Fatalf("second message answered %+v, want a completed task of context %s", res, ctxID)
			}
			got, err := c.GetTask(t.Context(), &a2a.GetTaskRequest{ID: first.task.ID})
			if err != nil || got.ContextID != ctxID || got.Status.State != a2a.TaskStateCompleted || artifactText(got) != first.text {
				t.Fatalf("GetTask(first) = %+v, %v", got, err)
			}

			// Cancel stops a /sleep turn; the cancelled task stays cancelled.
			res, err = c.SendMessage(t.Context(), &a2a.SendMessageRequest{
				Message: textMessage("/sleep 30s\nslow", ctxID, "").Message,
				Config:  &a2a.SendMessageConfig{ReturnImmediately: true},
			})
			if err != nil {
				t.Fatal(err)
			}
			slow := res.(*a2a.Task)
			if slow.Status.State != a2a.TaskStateWorking || slow.ContextID != ctxID {
				t.Fatalf("a /sleep turn with returnImmediately answered %+v", slow)
			}
			began := time.Now()
			cancelled, err := c.CancelTask(t.Context(), &a2a.CancelTaskRequest{ID: slow.ID})
			if err != nil || cancelled.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("CancelTask = %+v, %v", cancelled, err)
			}
			if d := time.Since(began); d > 20*time.Second {
				t.Fatalf("cancel took %s: the sleep was not stopped", d)
			}

			// What A2A refuses.
			var subErr error
			for _, err := range c.SubscribeToTask(t.Context(), &a2a.SubscribeToTaskRequest{ID: first.task.ID}) {
				if err != nil {
					subErr = err
				}
			}
			if !errors.Is(subErr, a2a.ErrUnsupportedOperation) {
				t.Errorf("SubscribeToTask(terminal) error %v, want UnsupportedOperation", subErr)
			}
			if _, err := c.CancelTask(t.Context(), &a2a.CancelTaskRequest{ID: first.task.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
				t.Errorf("CancelTask(completed) error %v, want TaskNotCancelable", err)
			}
			if _, err := c.GetTask(t.Context(), &a2a.GetTaskRequest{ID: "no-such-task"}); !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Errorf("GetTask(unknown) error %v, want TaskNotFound", err)
			}
			if _, err := c.SendMessage(t.Context(), textMessage("late", ctxID, first.task.ID)); !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("a message to a completed task: error %v, want InvalidParams", err)
			}
			if _, err := c.GetTaskPushConfig(t.Context(), &a2a.GetTaskPushConfigRequest{TaskID: first.task.ID, ID: "x"}); !errors.Is(err, a2a.ErrInvalidParams) {
				t.Errorf("GetTaskPushConfig(unknown) error %v, want InvalidParams", err)
			}

			// Without the token every method is refused; the card is public.
			anon, _ := a2aClient(t, base, "spawn", tp, "")
			if _, err := anon.GetTask(t.Context(), &a2a.GetTaskRequest{ID: first.task.ID}); err == nil {
				t.Error("GetTask without a token succeeded")
			}
			if _, err := anon.SendMessage(t.Context(), textMessage("no token", "", "")); err == nil {
				t.Error("SendMessage without a token succeeded")
			}
		})
	}
}

// TestA2A_RootCardIsTheDefaultProvider resolves the card at the host
// root.
func TestA2A_RootCardIsTheDefaultProvider(t *testing.T) {
	t.Parallel()
	base := wiredServer(t, nil)
	card, err := agentcard.DefaultResolver.Resolve(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	if card.Name != "spawn" || len(card.SupportedInterfaces) != 2 || card.SupportedInterfaces[0].URL != base+"/a2a/spawn" {
		t.Fatalf("root card %+v", card)
	}
	if len(card.SecuritySchemes) != 0 {
		t.Fatalf("without tokens the card names security %+v", card.SecuritySchemes)
	}
	if _, err := agentcard.DefaultResolver.Resolve(t.Context(), base+"/a2a/nobody"); err == nil {
		t.Fatal("the card of an unknown provider resolved")
	}
}

// TestA2A_SubscribeAfterADroppedStream drops a stream mid-task and
// subscribes to the task again: the subscription replays the task from
// its start and follows it to its end. The task's second step is a
// message sent to the running task, so there is text before the drop and
// after it.
func TestA2A_SubscribeAfterADroppedStream(t *testing.T) {
	t.Parallel()
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		base := wiredServer(t, nil)
		testSubscribeAfterDrop(t, base, base)
	})
	t.Run("postgres two replicas", func(t *testing.T) {
		t.Parallel()
		db := pgtest.URL(t)
		a := startServer(t, replicaEnv(db, "replica-a")).base
		b := startServer(t, replicaEnv(db, "replica-b")).base
		testSubscribeAfterDrop(t, a, b)
	})
}

// testSubscribeAfterDrop streams a task from base and subscribes to it
// again on other.
func testSubscribeAfterDrop(t *testing.T, base, other string) {
	for _, tp := range a2aTransports {
		t.Run(string(tp), func(t *testing.T) {
			t.Parallel()
			c, _ := a2aClient(t, base, "spawn", tp, "")
			ctx, drop := context.WithCancel(t.Context())
			defer drop()
			const firstWant = "echo: /sleep 3s\nfirst"
			var steered chan a2a.SendMessageResult
			var steerErr chan error
			before := collect(t, c.SendStreamingMessage(ctx, textMessage("/sleep 3s\nfirst", "", "")), func(s streamed) bool {
				if steered == nil {
					// Once the task's first step took its input (its
					// step/start is logged), send it a second message: it
					// joins the next step.
					waitSSE(t, base+"/v1/sessions/"+s.task.ContextID+"/stream?after=-1", func(typ, _ string) bool { return typ == "step/start" })
					steered, steerErr = make(chan a2a.SendMessageResult, 1), make(chan error, 1)
					go func() {
						res, err := c.SendMessage(t.Context(), &a2a.SendMessageRequest{
							Message: textMessage("/sleep 3s\nsecond", s.task.ContextID, s.task.ID).Message,
							Config:  &a2a.SendMessageConfig{ReturnImmediately: true},
						})
						steered <- res
						steerErr <- err
					}()
				}
				return s.text == firstWant
			})
			drop()
			if before.text != firstWant {
				t.Fatalf("before the drop the stream carried %q", before.text)
			}
			res, err := <-steered, <-steerErr
			if err != nil {
				t.Fatal(err)
			}
			if task, ok := res.(*a2a.Task); !ok || task.ID != before.task.ID || task.Status.State != a2a.TaskStateWorking {
				t.Fatalf("the message to the running task answered %+v, want that task, working", res)
			}

			sub, _ := a2aClient(t, other, "spawn", tp, "")
			after := collect(t, sub.SubscribeToTask(t.Context(), &a2a.SubscribeToTaskRequest{ID: before.task.ID}), nil)
			if after.task == nil || after.task.ID != before.task.ID {
				t.Fatalf("the subscription began with %+v", after.task)
			}
			if want := firstWant + "echo: /sleep 3s\nsecond"; after.text != want || after.final != a2a.TaskStateCompleted {
				t.Fatalf("the subscription replayed %q ending %s, want %q, completed", after.text, after.final, want)
			}
		})
	}
}
