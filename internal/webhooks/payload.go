package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Event types. EventTypes is the one list of them: api/openapi.yaml's
// WebhookEventType enum and webhooks section mirror it, and a type that
// later features emit is one more line here and in classify.
const (
	RunStarted        = "run.started"
	RunSettled        = "run.settled"
	TaskStarted       = "task.started"
	TaskSettled       = "task.settled"
	ApprovalRequested = "approval.requested"
	ApprovalDecided   = "approval.decided"
	TreePaused        = "tree.paused"
	TreeResumed       = "tree.resumed"
	TreeCancelled     = "tree.cancelled"
	// Test is sent only on request (Service.Test), whatever an endpoint
	// subscribed to.
	Test = "webhook.test"
)

// EventTypes lists every event type, in the order the API documents them.
var EventTypes = []string{RunStarted, RunSettled, TaskStarted, TaskSettled,
	ApprovalRequested, ApprovalDecided, TreePaused, TreeResumed, TreeCancelled, Test}

// treeTypes maps the lifecycle types of whole-tree events onto their
// webhook types.
var treeTypes = map[string]string{
	governance.EventTreePaused:    TreePaused,
	governance.EventTreeResumed:   TreeResumed,
	governance.EventTreeCancelled: TreeCancelled,
}

// event is a lifecycle event as a webhook carries it: its type, its
// payload's data, and the run whose trace the delivery joins ("" for
// none).
type event struct {
	typ   string
	data  bodyData
	runID string
	// taskID is the activation's the event is about, "" for none: a push
	// endpoint takes only its task's (takes).
	taskID string
}

// classify maps lifecycle event le onto the webhook that carries it:
// subagent/start and subagent/end are run.* for one-shot runs and task.*
// for activations (which carry a taskId); approval/* are approval.*; the
// tree events tree.*. ok is false for events no webhook carries. The
// lifecycle payloads are the ones api/openapi.yaml documents.
func classify(le store.LifecycleEvent) (ev event, ok bool, err error) {
	switch le.Type {
	case subagent.EventStart, subagent.EventEnd:
		e, err := subagent.ParseEvent(le)
		if err != nil {
			return event{}, false, err
		}
		ev = event{runID: e.RunID, taskID: e.TaskID, data: bodyData{SessionID: e.ID, ParentSessionID: e.ParentID, RootSessionID: e.RootID,
			Provider: e.Provider, StopReason: e.StopReason}}
		started := le.Type == subagent.EventStart
		switch {
		case e.TaskID != "":
			ev.typ, ev.data.TaskID = TaskSettled, e.TaskID
			if started {
				ev.typ = TaskStarted
			}
		default:
			ev.typ, ev.data.RunID = RunSettled, e.RunID
			if started {
				ev.typ = RunStarted
			}
		}
		return ev, true, nil
	case governance.EventApprovalRequested, governance.EventApprovalDecided:
		var p struct {
			ApprovalID, SessionID, ParentSessionID, RootSessionID, Provider, RunID, TaskID string
		}
		if err := json.Unmarshal(le.Payload, &p); err != nil {
			return event{}, false, fmt.Errorf("decode lifecycle event %d (%s): %w", le.ID, le.Type, err)
		}
		ev = event{typ: ApprovalDecided, runID: p.RunID, taskID: p.TaskID, data: bodyData{ApprovalID: p.ApprovalID, SessionID: p.SessionID,
			ParentSessionID: p.ParentSessionID, RootSessionID: p.RootSessionID, Provider: p.Provider}}
		if le.Type == governance.EventApprovalRequested {
			ev.typ = ApprovalRequested
		}
		return ev, true, nil
	}
	if typ, ok := treeTypes[le.Type]; ok {
		var p struct{ SessionID, RootSessionID string }
		if err := json.Unmarshal(le.Payload, &p); err != nil {
			return event{}, false, fmt.Errorf("decode lifecycle event %d (%s): %w", le.ID, le.Type, err)
		}
		return event{typ: typ, data: bodyData{SessionID: p.SessionID, RootSessionID: p.RootSessionID}}, true, nil
	}
	return event{}, false, nil
}

// body is the thin payload every delivery carries: fetch the object for
// more. Field order is fixed, so a retry resends identical bytes.
type body struct {
	Type      string   `json:"type"`
	Timestamp string   `json:"timestamp"`
	Data      bodyData `json:"data"`
}

// bodyData names the run, task or approval (or, for webhook.test, the
// endpoint). SessionID is the child's session, the run's or task's own,
// the one that asked for the approval, or the session a tree event is
// about.
type bodyData struct {
	RunID           string `json:"runId,omitempty"`
	TaskID          string `json:"taskId,omitempty"`
	ApprovalID      string `json:"approvalId,omitempty"`
	WebhookID       string `json:"webhookId,omitempty"`
	SessionID       string `json:"sessionId,omitempty"`
	ParentSessionID string `json:"parentSessionId,omitempty"`
	RootSessionID   string `json:"rootSessionId,omitempty"`
	Provider        string `json:"provider,omitempty"`
	StopReason      string `json:"stopReason,omitempty"`
}

// timestamp formats t as the payloads do (RFC 3339, UTC).
func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// eventID is the webhook-id of a lifecycle event: the same on every
// attempt, and unique since lifecycle ids are.
func eventID(le store.LifecycleEvent) string { return "evt_" + itoa(le.ID) }

// lifecycleBody builds the payload of lifecycle event le as ev. It
// depends only on the log and on session headers, which never change, so
// every attempt builds the same bytes.
func (s *Service) lifecycleBody(ctx context.Context, le store.LifecycleEvent, ev event) ([]byte, error) {
	// Events carry their tree's root; those written before they did are
	// walked up to it.
	d := ev.data
	if d.RootSessionID == "" {
		var err error
		if d.RootSessionID, err = s.roots.root(ctx, d.ParentSessionID); err != nil {
			return nil, err
		}
	}
	return marshal(body{Type: ev.typ, Timestamp: timestamp(le.Time), Data: d})
}

// maxMemo bounds a memo; past it the memo starts over.
const maxMemo = 10_000

// memo remembers values that never change once known (a session's root, a
// run's traceparent), at most maxMemo of them. Safe for concurrent use.
type memo[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

func (c *memo[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[key]
	return v, ok
}

// put remembers v for each of keys.
func (c *memo[V]) put(v V, keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m)+len(keys) > maxMemo {
		c.m = nil
	}
	if c.m == nil {
		c.m = make(map[string]V)
	}
	for _, k := range keys {
		c.m[k] = v
	}
}

// roots finds the root session of a session by walking session headers up,
// remembering what it learnt: a header's parent never changes.
type roots struct {
	st interface {
		GetSession(ctx context.Context, id string) (store.Session, error)
	}
	memo memo[string] // session id → root session id
}

// root returns the root of the tree holding session id. A header that is
// gone (evicted from the in-memory store) ends the walk: the last session
// found counts as the root.
func (r *roots) root(ctx context.Context, id string) (string, error) {
	var walked []string
	for id != "" {
		if root, ok := r.memo.get(id); ok {
			id = root
			break
		}
		walked = append(walked, id)
		sess, err := r.st.GetSession(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if err != nil {
			return "", err
		}
		if sess.ParentID == "" {
			break
		}
		id = sess.ParentID
	}
	r.memo.put(id, walked...)
	return id, nil
}
