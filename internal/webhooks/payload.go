package webhooks

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Event types. EventTypes is the one list of them: api/openapi.yaml's
// WebhookEventType enum and webhooks section mirror it, and a type that
// later features emit is one more line here and in lifecycleType.
const (
	RunStarted  = "run.started"
	RunSettled  = "run.settled"
	TaskStarted = "task.started"
	TaskSettled = "task.settled"
	// Test is sent only on request (Service.Test), whatever an endpoint
	// subscribed to.
	Test = "webhook.test"
)

// EventTypes lists every event type, in the order the API documents them.
var EventTypes = []string{RunStarted, RunSettled, TaskStarted, TaskSettled, Test}

// lifecycleType maps a lifecycle event onto its webhook type: subagent/start
// and subagent/end are run.* for one-shot runs and task.* for activations
// (which carry a taskId). ok is false for events no webhook carries.
func lifecycleType(e subagent.Event) (typ string, ok bool) {
	switch {
	case e.Type == subagent.EventStart && e.TaskID == "":
		return RunStarted, true
	case e.Type == subagent.EventEnd && e.TaskID == "":
		return RunSettled, true
	case e.Type == subagent.EventStart:
		return TaskStarted, true
	case e.Type == subagent.EventEnd:
		return TaskSettled, true
	}
	return "", false
}

// body is the thin payload every delivery carries: fetch the object for
// more. Field order is fixed, so a retry resends identical bytes.
type body struct {
	Type      string   `json:"type"`
	Timestamp string   `json:"timestamp"`
	Data      bodyData `json:"data"`
}

// bodyData names the run or task (or, for webhook.test, the endpoint).
// SessionID is the child's session, the run's or task's own.
type bodyData struct {
	RunID           string `json:"runId,omitempty"`
	TaskID          string `json:"taskId,omitempty"`
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

// lifecycleBody builds the payload of a lifecycle event of webhook type
// typ. It depends only on the log and on session headers, which never
// change, so every attempt builds the same bytes.
func (s *Service) lifecycleBody(ctx context.Context, le store.LifecycleEvent, e subagent.Event, typ string) ([]byte, error) {
	// Events carry their tree's root; those written before it did are
	// walked up to it.
	root := e.RootID
	if root == "" {
		var err error
		if root, err = s.roots.root(ctx, e.ParentID); err != nil {
			return nil, err
		}
	}
	d := bodyData{SessionID: e.ID, ParentSessionID: e.ParentID, RootSessionID: root, Provider: e.Provider, StopReason: e.StopReason}
	if e.TaskID != "" {
		d.TaskID = e.TaskID
	} else {
		d.RunID = e.RunID
	}
	return marshal(body{Type: typ, Timestamp: timestamp(le.Time), Data: d})
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
