package http

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// asyncFollowup is followup with Prefer: respond-async.
func asyncFollowup(child, parent, text string) call {
	c := followup(child, parent, text)
	c.header = map[string]string{"Prefer": "respond-async"}
	return c
}

// acceptedFollowup sends c, an asyncFollowup, and returns its 202 answer.
func (b *testBundle) acceptedFollowup(t *testing.T, c call) followupAcceptedResponse {
	t.Helper()
	r := b.want(t, http.StatusAccepted, c)
	if got := r.header.Get("Preference-Applied"); got != "respond-async" {
		t.Fatalf("Preference-Applied %q", got)
	}
	var out followupAcceptedResponse
	r.decode(t, &out)
	if out.MessageID == "" || out.Route != "accepted" {
		t.Fatalf("accepted followup %+v", out)
	}
	return out
}

// messageRoutedJSON is the data of a message/routed frame.
type messageRoutedJSON struct {
	MessageID       string `json:"messageId"`
	ChildSessionID  string `json:"childSessionId"`
	ParentSessionID string `json:"parentSessionId"`
	RootSessionID   string `json:"rootSessionId"`
	Outcome         string `json:"outcome"`
	TaskID          string `json:"taskId"`
	Code            string `json:"code"`
	Message         string `json:"message"`
}

// untilRouted reads lifecycle stream s up to the message/routed frame of
// message id.
func untilRouted(t *testing.T, s *sseStream, id string) messageRoutedJSON {
	t.Helper()
	for {
		f := s.next(t)
		if f.event != children.EventMessageRouted {
			continue
		}
		var e messageRoutedJSON
		if err := json.Unmarshal(f.data, &e); err != nil {
			t.Fatal(err)
		}
		if e.MessageID == id {
			return e
		}
	}
}

// loggedTimes counts the user/messages of log with message id id.
func loggedTimes(t *testing.T, b *testBundle, session, id string) int {
	t.Helper()
	n := 0
	for _, e := range b.sessionLog(t, session) {
		if e.Type != sessionlog.EventUserMessage {
			continue
		}
		var m sessionlog.UserMessage
		if err := json.Unmarshal(e.Data, &m); err != nil {
			t.Fatal(err)
		}
		if m.ID == id {
			n++
		}
	}
	return n
}

// TestSubagents_RespondAsyncFollowupAnswersAtAcceptance: with Prefer:
// respond-async a followup to a child whose model step is held answers 202
// while the step still holds — the message is in the child's durable inbox,
// not yet in its log — and message/routed then says it was steered into the
// running task, once the next step admitted it; the log holds it once. Bad
// input is still refused before anything is stored. On both stores.
func TestSubagents_RespondAsyncFollowupAnswersAtAcceptance(t *testing.T) {
	for name, st := range bothStores {
		t.Run(name, func(t *testing.T) {
			held := newGate()
			w := setupWorldWith(t, st(t), scriptedRoute("main", replying(map[string]gate{"hold": held})))
			parent, other := w.rootSession(t), w.rootSession(t)
			events := w.stream(t, "/v1/events?after=0&types="+children.EventMessageRouted, nil)
			child := w.startChild(t, parent, "hold", nil)
			await(t, held.reached, "the child's model call")

			w.wantProblem(t, http.StatusForbidden, subagent.EForbidden, asyncFollowup(child.ChildID, other, "not yours"))
			w.wantProblem(t, http.StatusNotFound, subagent.ESessionNotFound, asyncFollowup("nobody", parent, "x"))

			accepted := w.acceptedFollowup(t, asyncFollowup(child.ChildID, parent, "also this"))
			if accepted.ChildID != child.ChildID {
				t.Fatalf("accepted %+v", accepted)
			}
			// The held step has not ended, so no step admitted the message.
			if n := loggedTimes(t, w.testBundle, child.ChildID, accepted.MessageID); n != 0 {
				t.Fatalf("the message was logged %d times before its step", n)
			}
			rows, err := w.st.Pending(t.Context(), child.ChildID)
			if err != nil || len(rows) != 1 || rows[0].ID != accepted.MessageID {
				t.Fatalf("child inbox at the 202: %+v, %v", rows, err)
			}

			close(held.open)
			routed := untilRouted(t, events, accepted.MessageID)
			if routed != (messageRoutedJSON{MessageID: accepted.MessageID, ChildSessionID: child.ChildID, ParentSessionID: parent,
				RootSessionID: parent, Outcome: string(subagent.RouteSteered), TaskID: child.TaskID}) {
				t.Fatalf("message/routed %+v", routed)
			}
			w.settledTask(t, child.TaskID)
			if n := loggedTimes(t, w.testBundle, child.ChildID, accepted.MessageID); n != 1 {
				t.Fatalf("the message is in the child's log %d times, want once", n)
			}
			if got := userTexts(t, w.sessionLog(t, child.ChildID)); len(got) != 2 || got[1] != "also this" {
				t.Fatalf("child's user messages %q", got)
			}
		})
	}
}

// TestSubagents_RespondAsyncFollowupParkedAndStarted: an async followup
// to a child sleeping in a slow echo step answers 202 at once; an
// interrupt then parks it (message/routed parked, no task), and an async
// followup to the settled child is announced started, in a new task that
// runs the parked message first, each logged once.
func TestSubagents_RespondAsyncFollowupParkedAndStarted(t *testing.T) {
	w := setupWorld(t, echoRoute())
	parent := w.rootSession(t)
	events := w.stream(t, "/v1/events?after=0&types="+children.EventMessageRouted, nil)
	child := w.startChild(t, parent, "/sleep 5m\nslow work", nil)

	parked := w.acceptedFollowup(t, asyncFollowup(child.ChildID, parent, "while you sleep"))
	w.want(t, http.StatusAccepted, interrupt(child.ChildID, parent))
	if got := untilRouted(t, events, parked.MessageID); got.Outcome != string(subagent.RouteParked) || got.TaskID != "" {
		t.Fatalf("message/routed of the parked followup %+v", got)
	}
	w.settledTask(t, child.TaskID)

	next := w.acceptedFollowup(t, asyncFollowup(child.ChildID, parent, "wake up"))
	started := untilRouted(t, events, next.MessageID)
	if started.Outcome != string(subagent.RouteStarted) || started.TaskID == "" || started.TaskID == child.TaskID {
		t.Fatalf("message/routed of the followup to the settled child %+v", started)
	}
	w.settledTask(t, started.TaskID)
	for _, id := range []string{parked.MessageID, next.MessageID} {
		if n := loggedTimes(t, w.testBundle, child.ChildID, id); n != 1 {
			t.Fatalf("message %s is in the child's log %d times, want once", id, n)
		}
	}
	if got := userTexts(t, w.sessionLog(t, child.ChildID)); len(got) != 3 || got[1] != "while you sleep" || got[2] != "wake up" {
		t.Fatalf("child's user messages %q", got)
	}
}

// TestSubagents_RespondAsyncFollowupFailedWhenDisposed: a child disposed
// while an async followup waits for its step never gets the message:
// message/routed says failed, with the code a synchronous followup would
// have answered (DISPOSED), and the child's log does not hold it.
func TestSubagents_RespondAsyncFollowupFailedWhenDisposed(t *testing.T) {
	held := newGate()
	w := setupWorld(t, scriptedRoute("main", replying(map[string]gate{"hold": held})))
	parent := w.rootSession(t)
	events := w.stream(t, "/v1/events?after=0&types="+children.EventMessageRouted, nil)
	child := w.startChild(t, parent, "hold", nil)
	await(t, held.reached, "the child's model call")
	accepted := w.acceptedFollowup(t, asyncFollowup(child.ChildID, parent, "too late"))
	w.want(t, http.StatusNoContent, disposeChild(child.ChildID, parent))
	routed := untilRouted(t, events, accepted.MessageID)
	if routed.Outcome != children.OutcomeFailed || routed.Code != subagent.EDisposed || routed.Message == "" || routed.TaskID != "" {
		t.Fatalf("message/routed %+v, want failed with DISPOSED", routed)
	}
	if n := loggedTimes(t, w.testBundle, child.ChildID, accepted.MessageID); n != 0 {
		t.Fatalf("the withdrawn message is in the child's log %d times", n)
	}
}
