package sessionlog

import (
	"reflect"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
)

func TestLoggedMessages_IDsOfUserMessages(t *testing.T) {
	t.Parallel()
	log := append(logOf(
		EventUserMessage, UserMessage{ID: "m1", Role: "user", Content: []model.Block{model.TextBlock("a")}},
		EventAssistantMessage, message(model.TextBlock("reply")),
		EventUserMessage, UserMessage{Role: "user"}, // no id: not a delivered row
		EventUserMessage, UserMessage{ID: "m2", Role: "user"},
	), store.Event{Type: EventUserMessage, Data: []byte(`{"id":`)})
	if got, want := LoggedMessages(log), map[string]bool{"m1": true, "m2": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// The outcome fold collects the same ids, in log order.
	if got := OutcomeOf(log).Messages; !reflect.DeepEqual(got, []string{"m1", "m2"}) {
		t.Errorf("outcome messages = %v", got)
	}
}

func TestLastTask_LastUserMessageThatDecodes(t *testing.T) {
	t.Parallel()
	log := append(logOf(
		EventUserMessage, UserMessage{ID: "m1", Content: []model.Block{model.TextBlock("first")}},
		EventUserMessage, UserMessage{ID: "m2", Content: []model.Block{model.TextBlock("second")}},
		EventTurnStart, TurnData{Turn: 2},
	), store.Event{Type: EventUserMessage, Data: []byte(`[`)})
	if got := model.Text(LastTask(log)); got != "second" {
		t.Errorf("got %q, want second", got)
	}
	if got := LastTask(logOf(EventTurnStart, TurnData{Turn: 1})); got != nil {
		t.Errorf("no user/message: got %v", got)
	}
}
