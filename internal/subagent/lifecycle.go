package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/subagentd/subagentd/internal/jsonstr"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// eventPayload is the durable and wire form of a lifecycle event (the data
// of an SSE frame of /v1/events, api/openapi.yaml). Provider events carry only
// provider.
type eventPayload struct {
	RunID                string        `json:"runId,omitempty"`
	Provider             string        `json:"provider"`
	ID                   string        `json:"id,omitempty"`
	Local                *bool         `json:"local,omitempty"`
	ParentSessionID      string        `json:"parentSessionId,omitempty"`
	RootSessionID        string        `json:"rootSessionId,omitempty"`
	TaskID               string        `json:"taskId,omitempty"`
	StopReason           string        `json:"stopReason,omitempty"`
	LastAssistantMessage []model.Block `json:"lastAssistantMessage,omitempty"`
}

// isRunEvent reports whether typ is subagent/start or subagent/end.
func IsRunEvent(typ string) bool { return typ == EventStart || typ == EventEnd }

// EventPayload returns the JSON payload of e as stored in the lifecycle log:
// {runId, provider, id, local, parentSessionId, rootSessionId, taskId?} for subagent/start,
// plus stopReason and lastAssistantMessage (omitted when empty) for
// subagent/end; {provider} for provider events. It writes what
// json.Marshal writes for eventPayload (the decoding side, ParseEvent),
// without reflection: every run writes two. Returns an error when a block
// of lastAssistantMessage holds invalid JSON.
func EventPayload(e Event) (json.RawMessage, error) {
	b := make([]byte, 0, 256)
	b = append(b, '{')
	run := IsRunEvent(e.Type)
	if run && e.RunID != "" {
		b = appendField(b, "runId", e.RunID)
	}
	b = appendField(b, "provider", e.Provider)
	if run {
		if e.ID != "" {
			b = appendField(b, "id", e.ID)
		}
		b = append(b, `,"local":`...)
		b = strconv.AppendBool(b, e.Local)
		if e.ParentID != "" {
			b = appendField(b, "parentSessionId", e.ParentID)
		}
		if e.RootID != "" {
			b = appendField(b, "rootSessionId", e.RootID)
		}
		if e.TaskID != "" {
			b = appendField(b, "taskId", e.TaskID)
		}
	}
	if e.Type == EventEnd {
		if e.StopReason != "" {
			b = appendField(b, "stopReason", e.StopReason)
		}
		if len(e.LastAssistantMessage) > 0 {
			msg, err := model.MarshalBlocks(e.LastAssistantMessage)
			if err != nil {
				return nil, fmt.Errorf("encode %s payload: %w", e.Type, err)
			}
			b = append(b, `,"lastAssistantMessage":`...)
			b = append(b, msg...)
		}
	}
	return append(b, '}'), nil
}

// appendField appends "name":value to the object b holds, after a comma
// unless it is the object's first field.
func appendField(b []byte, name, value string) []byte {
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":`...)
	return jsonstr.Append(b, value)
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
		RootID:               p.RootSessionID,
		TaskID:               p.TaskID,
		StopReason:           p.StopReason,
		LastAssistantMessage: p.LastAssistantMessage,
	}, nil
}

// storedTime is t as a store keeps it (UTC, whole microseconds, like a
// timestamptz), so that a row this process builds equals the one read back.
func storedTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// lifecycleRow returns the store row of e, stamped at.
func LifecycleRow(e Event, at time.Time) (store.LifecycleEvent, error) {
	payload, err := EventPayload(e)
	if err != nil {
		return store.LifecycleEvent{}, err
	}
	return store.LifecycleEvent{Type: e.Type, ParentID: e.ParentID, RootID: e.RootID, RunID: e.RunID, Time: at, Payload: payload}, nil
}

// endRetryFor bounds how long recordEnd keeps retrying a failing store.
const endRetryFor = 10 * time.Minute

// recordEnd settles run e.RunID with res and appends e to the lifecycle log
// in one store transaction. A store failure is retried with backoff (up to
// endRetryFor): an end must be recorded exactly once, and a run row left
// running would have its lease renewed for the life of the process and be
// reaped as lost — a second, contradicting end — after a restart. It
// returns e with its stored id and whether to dispatch it: not when the
// store says the run already ended (another replica closed it after this
// one lost its lease: that end was the only one). After a failure that
// outlasted the retries the end is still dispatched, so local listeners see
// every run end. A zero res.EndedAt is now; e.Seq is set only when the end
// was recorded.
//
// An end fenced by a resident lease this replica no longer holds
// (store.ErrFenced: an activation's) is never retried as it is: reclaim
// claims the lease again for the loop that holds it here, and the end is
// retried under it; when another replica holds the lease live, the run row
// is still this replica's (its run lease is renewed here, so no other
// replica closes it), and it is ended without the fence — once, since an
// end only settles a running run.
func (s *Service) RecordEnd(ctx context.Context, log *slog.Logger, e Event, res store.RunResult, reclaim func(context.Context) error) (Event, bool) {
	if res.EndedAt.IsZero() {
		res.EndedAt = time.Now()
	}
	row, err := LifecycleRow(e, res.EndedAt)
	if err != nil {
		log.ErrorContext(ctx, "encode run end", slog.Any("error", err))
		return e, true
	}
	wait, deadline := 100*time.Millisecond, time.Now().Add(endRetryFor)
	for {
		stored, err := s.store.EndRun(ctx, e.RunID, res, row)
		switch {
		case err == nil:
			e.Seq = stored.ID
			return e, true
		case errors.Is(err, store.ErrConflict):
			log.WarnContext(ctx, "run was already ended elsewhere; not dispatching a second end")
			return e, false
		case errors.Is(err, store.ErrFenced) && store.Owner(ctx) != "":
			if reclaim != nil {
				if rerr := reclaim(ctx); rerr == nil {
					log.WarnContext(ctx, "run end was fenced; reclaimed the lease", slog.Any("error", err))
					reclaim = nil // once: a second fence ends it unfenced
					continue
				} else {
					log.WarnContext(ctx, "run end was fenced; the lease could not be reclaimed", slog.Any("error", rerr))
				}
			}
			ctx = store.WithOwner(ctx, "")
			continue
		case errors.Is(err, store.ErrNotFound) || ctx.Err() != nil || time.Now().After(deadline):
			log.ErrorContext(ctx, "record run end", slog.Any("error", err))
			return e, true
		}
		log.WarnContext(ctx, "record run end failed; retrying", slog.Duration("in", wait), slog.Any("error", err))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}
