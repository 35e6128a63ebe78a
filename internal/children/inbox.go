package children

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// The durable mailbox of resident agents (docs/architecture.md §5): every message
// accepted for a root session or a continuable child — prompt, followup,
// settlement notice, report — is a store.InboxMessage row before the
// acceptance is answered, and is acknowledged (store.Ack) only once the
// session's log holds it as a user/message with the row's id. A crash thus
// leaves exactly the messages the log lacks, which start-up recovery
// (resident.RecoverInboxes) delivers.

// InboxRow is the durable inbox row of msg for session sessionID; an empty
// msg.ID gets a fresh one, which becomes the row's id. It returns an error
// when the content or source does not marshal.
func InboxRow(sessionID string, msg sessionlog.UserMessage) (store.InboxMessage, error) {
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
func newRow(childID string, content []model.Block, src sessionlog.Source) (store.InboxMessage, error) {
	return InboxRow(childID, sessionlog.UserMessage{Content: content, Source: src})
}

// RowMessage is the user message a row delivers, with the row's id.
func RowMessage(row store.InboxMessage) (sessionlog.UserMessage, error) {
	msg := sessionlog.UserMessage{ID: row.ID, Role: "user"}
	if err := json.Unmarshal(row.Content, &msg.Content); err != nil {
		return msg, fmt.Errorf("inbox message %s: content: %w", row.ID, err)
	}
	if err := json.Unmarshal(row.Source, &msg.Source); err != nil {
		return msg, fmt.Errorf("inbox message %s: source: %w", row.ID, err)
	}
	return msg, nil
}

// ack removes delivered (or withdrawn) rows from the durable inbox. A
// failure is logged: a delivered row left behind is recognised from the log
// at the next cold resume.
func (m *Manager) ack(ctx context.Context, childID string, ids ...string) {
	if err := m.store.Ack(ctx, childID, ids...); err != nil {
		m.log.ErrorContext(ctx, "remove delivered or withdrawn inbox messages", slog.String("child_id", childID), slog.Any("error", err))
	}
}
