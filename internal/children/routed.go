package children

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// EventMessageRouted is the lifecycle type that announces where an
// asynchronous followup (FollowupAsync) went; its data is messageRouted.
const EventMessageRouted = "message/routed"

// OutcomeFailed is the outcome of an asynchronous followup that was
// accepted and then not delivered — a cold resume failed, or the child was
// disposed — so its message was withdrawn; every other outcome is the
// followup's Route.
const OutcomeFailed = "failed"

// messageRouted is the data of EventMessageRouted (api/openapi.yaml,
// MessageRoutedEvent): the message, its child and the child's parent and
// root, and the outcome — a Route, or OutcomeFailed with the error's Code
// and Message — plus the task that runs the message, when one does.
type messageRouted struct {
	MessageID       string `json:"messageId"`
	ChildSessionID  string `json:"childSessionId"`
	ParentSessionID string `json:"parentSessionId"`
	RootSessionID   string `json:"rootSessionId"`
	Outcome         string `json:"outcome"`
	TaskID          string `json:"taskId,omitempty"`
	Code            string `json:"code,omitempty"`
	Message         string `json:"message,omitempty"`
}

// routedMessage is an accepted asynchronous followup: its row, and the
// child's parent and root.
type routedMessage struct {
	parentID, rootID string
	row              store.InboxMessage
}

// announce waits, off the caller, for the route of msg that w delivers and
// appends it as EventMessageRouted, once. A message the manager could not
// route because the manager shuts down (EAborted) stays accepted and is
// not announced. A cold resume that found the child claimed by another
// replica withdrew the row (resident.ErrHeldElsewhere): it is sent there
// again, asynchronously, and that replica announces it.
func (m *Manager) announce(ctx context.Context, msg routedMessage, w <-chan answer) {
	ctx = context.WithoutCancel(ctx)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		a := <-w
		log := m.log.With(slog.String("child_id", msg.row.ChildID), slog.String("message_id", msg.row.ID))
		if errors.Is(a.err, resident.ErrHeldElsewhere) {
			if _, err := m.followupRow(ctx, msg.parentID, msg.row, true); err != nil {
				log.ErrorContext(ctx, "forward an asynchronous followup to the child's new owner", slog.Any("error", err))
			}
			return
		}
		res, err := m.routed(a)
		if subagent.ErrorCode(err) == subagent.EAborted {
			return
		}
		data := messageRouted{MessageID: msg.row.ID, ChildSessionID: msg.row.ChildID, ParentSessionID: msg.parentID,
			RootSessionID: msg.rootID, Outcome: string(res.Route), TaskID: res.TaskID}
		if err != nil {
			log.WarnContext(ctx, "an asynchronous followup was not delivered", slog.Any("error", err))
			data.Outcome, data.Code, data.Message = OutcomeFailed, subagent.ErrorCode(err), subagent.ErrorMessage(err)
		}
		payload, err := json.Marshal(data)
		if err == nil {
			_, err = m.store.AppendLifecycle(ctx, store.LifecycleEvent{Type: EventMessageRouted, ParentID: msg.parentID,
				RootID: msg.rootID, Time: time.Now(), Payload: payload})
		}
		if err != nil {
			log.ErrorContext(ctx, "announce an asynchronous followup's route", slog.Any("error", err))
		}
	}()
}
