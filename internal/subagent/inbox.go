package subagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// The durable mailbox of resident agents (DESIGN §2): every message
// accepted for a root session or a continuable child — prompt, followup,
// settlement notice, report — is a store.InboxMessage row before the
// acceptance is answered, and is acknowledged (store.Ack) only once the
// session's log holds it as a user/message with the row's id. A crash thus
// leaves exactly the messages the log lacks, which start-up recovery
// (RecoverInboxes) delivers.

// InboxRow is the durable inbox row of msg for session sessionID; an empty
// msg.ID gets a fresh one, which becomes the row's id. It returns an error
// when the content or source does not marshal.
func InboxRow(sessionID string, msg agent.UserMessage) (store.InboxMessage, error) {
	content := msg.Content
	if content == nil {
		content = []model.Block{}
	}
	c, err := json.Marshal(content)
	if err != nil {
		return store.InboxMessage{}, err
	}
	s, err := json.Marshal(msg.Source)
	if err != nil {
		return store.InboxMessage{}, err
	}
	id := msg.ID
	if id == "" {
		id = uuid.NewString()
	}
	return store.InboxMessage{ID: id, ChildID: sessionID, Content: c, Source: s}, nil
}

// newRow is InboxRow for fresh content from src.
func newRow(childID string, content []model.Block, src agent.Source) (store.InboxMessage, error) {
	return InboxRow(childID, agent.UserMessage{Content: content, Source: src})
}

// RowMessage is the user message a row delivers, with the row's id.
func RowMessage(row store.InboxMessage) (agent.UserMessage, error) {
	msg := agent.UserMessage{ID: row.ID, Role: "user"}
	if err := json.Unmarshal(row.Content, &msg.Content); err != nil {
		return msg, fmt.Errorf("inbox message %s: content: %w", row.ID, err)
	}
	if err := json.Unmarshal(row.Source, &msg.Source); err != nil {
		return msg, fmt.Errorf("inbox message %s: source: %w", row.ID, err)
	}
	return msg, nil
}

// LoggedMessages returns the ids of the user/messages in events: the
// messages a log holds, whose inbox rows are delivered.
func LoggedMessages(events []store.Event) map[string]bool {
	ids := map[string]bool{}
	for _, e := range events {
		var msg agent.UserMessage
		if e.Type == agent.EventUserMessage && json.Unmarshal(e.Data, &msg) == nil && msg.ID != "" {
			ids[msg.ID] = true
		}
	}
	return ids
}

// RecoverInboxes calls recover, at start-up, for the header of every
// session of any tenant that has undelivered inbox rows, oldest message
// first, with ctx scoped to the session's tenant and without cancellation.
// Roots and the Manager both recover through it, each taking its own kind
// of session. Failures are logged per session and returned joined; the
// other sessions are still recovered. A session another replica drives
// (its lease is live) is left to that replica.
func RecoverInboxes(ctx context.Context, st store.Store, log *slog.Logger, recover func(ctx context.Context, sess store.Session) error) error {
	tried := map[store.PendingChild]bool{}
	var errs []error
	for {
		// The store lists at most 1000 sessions a call: list again until a
		// call names none that was not tried already.
		pending, err := st.PendingChildren(ctx)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("recover inboxes: %w", err))...)
		}
		more := false
		for _, p := range pending {
			if tried[p] {
				continue
			}
			tried[p], more = true, true
			base := store.WithTenant(context.WithoutCancel(ctx), p.Tenant)
			sess, err := st.GetSession(base, p.ChildID)
			if err == nil {
				err = recover(base, sess)
			}
			if errors.Is(err, ErrHeldElsewhere) {
				continue // another replica drives it and delivers its messages
			}
			if err != nil {
				log.ErrorContext(base, "recover accepted messages", slog.String("session_id", p.ChildID), slog.Any("error", err))
				errs = append(errs, fmt.Errorf("recover %s: %w", p.ChildID, err))
			}
		}
		if !more {
			return errors.Join(errs...)
		}
	}
}
