package subagent

import (
	"maps"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/sessionlog"
)

// TestLoggedMessages_CountsSnapshotLogged: a log read from its newest
// history/snapshot on still shows the messages the snapshot lists, so a
// resume acknowledges their rows instead of running them again.
func TestLoggedMessages_CountsSnapshotLogged(t *testing.T) {
	evs := logOf(
		sessionlog.EventSnapshot, sessionlog.SnapshotData{Version: sessionlog.SnapshotVersion, Logged: []string{"m1", "m2"}},
		sessionlog.EventUserMessage, sessionlog.UserMessage{ID: "m3", Role: "user"},
		sessionlog.EventSnapshot, map[string]any{"version": sessionlog.SnapshotVersion + 1, "logged": []string{"m9"}},
	)
	got := slices.Sorted(maps.Keys(LoggedMessages(evs)))
	if want := []string{"m1", "m2", "m3"}; !slices.Equal(got, want) {
		t.Errorf("LoggedMessages = %v, want %v (an unreadable snapshot counts none)", got, want)
	}
}
