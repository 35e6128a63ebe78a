package subagent

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// eventPayload is the durable and wire form of a lifecycle event (DESIGN §3:
// the data of an SSE frame of /v1/events). Provider events carry only
// provider.
type eventPayload struct {
	RunID                string        `json:"runId,omitempty"`
	Provider             string        `json:"provider"`
	ID                   string        `json:"id,omitempty"`
	Local                *bool         `json:"local,omitempty"`
	ParentSessionID      string        `json:"parentSessionId,omitempty"`
	TaskID               string        `json:"taskId,omitempty"`
	StopReason           string        `json:"stopReason,omitempty"`
	LastAssistantMessage []model.Block `json:"lastAssistantMessage,omitempty"`
}

// isRunEvent reports whether typ is subagent/start or subagent/end.
func isRunEvent(typ string) bool { return typ == EventStart || typ == EventEnd }

// EventPayload returns the JSON payload of e as stored in the lifecycle log:
// {runId, provider, id, local, parentSessionId, taskId?} for subagent/start,
// plus stopReason and lastAssistantMessage (omitted when empty) for
// subagent/end; {provider} for provider events.
func EventPayload(e Event) (json.RawMessage, error) {
	p := eventPayload{Provider: e.Provider}
	if isRunEvent(e.Type) {
		local := e.Local
		p.RunID, p.ID, p.Local, p.ParentSessionID, p.TaskID = e.RunID, e.ID, &local, e.ParentID, e.TaskID
	}
	if e.Type == EventEnd {
		p.StopReason, p.LastAssistantMessage = e.StopReason, e.LastAssistantMessage
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s payload: %w", e.Type, err)
	}
	return data, nil
}

// ParseEvent turns a stored lifecycle row back into an Event.
func ParseEvent(le store.LifecycleEvent) (Event, error) {
	var p eventPayload
	if err := json.Unmarshal(le.Payload, &p); err != nil {
		return Event{}, fmt.Errorf("decode lifecycle event %d (%s): %w", le.ID, le.Type, err)
	}
	return Event{
		Seq:                  le.ID,
		Type:                 le.Type,
		RunID:                p.RunID,
		Provider:             p.Provider,
		ID:                   p.ID,
		Local:                p.Local != nil && *p.Local,
		ParentID:             p.ParentSessionID,
		TaskID:               p.TaskID,
		StopReason:           p.StopReason,
		LastAssistantMessage: p.LastAssistantMessage,
	}, nil
}

// lifecycleRow returns the store row of e, stamped at.
func lifecycleRow(e Event, at time.Time) (store.LifecycleEvent, error) {
	payload, err := EventPayload(e)
	if err != nil {
		return store.LifecycleEvent{}, err
	}
	return store.LifecycleEvent{Type: e.Type, ParentID: e.ParentID, RunID: e.RunID, Time: at, Payload: payload}, nil
}
