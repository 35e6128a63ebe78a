package sessionlog

import (
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

// LoggedMessages returns the ids of the user/messages in events: the
// messages a log holds, whose inbox rows are delivered. Only the ids are
// decoded, not the content. A history/snapshot counts the ones it lists
// (SnapshotData.Logged): a log read from its newest snapshot on still shows
// those a crash may have left unacknowledged.
func LoggedMessages(events []store.Event) map[string]bool {
	ids := map[string]bool{}
	for _, e := range events {
		switch e.Type {
		case EventUserMessage:
			if id := messageIDOf(e, nil); id != "" {
				ids[id] = true
			}
		case EventSnapshot:
			for _, id := range SnapshotLogged(e) {
				ids[id] = true
			}
		}
	}
	return ids
}

// LastTask is the content of the last user/message in events that
// decodes: the task the log last gave its agent, such as the prompt of the
// turn just opened. It is nil when there is none.
func LastTask(events []store.Event) []model.Block {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type != EventUserMessage {
			continue
		}
		if m, err := Decode[UserMessage](events[i]); err == nil {
			return m.Content
		}
	}
	return nil
}
