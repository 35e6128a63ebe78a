package subagent

import (
	"context"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// countRuns is the lifecycle listener that counts runs and activations:
// every start this process dispatches and every end it records, whatever
// store call recorded them.
func countRuns(m *telemetry.Metrics) Listener {
	return func(_ context.Context, e Event) error {
		kind := telemetry.KindOneShot
		if e.TaskID != "" {
			kind = telemetry.KindActivation
		}
		switch e.Type {
		case EventStart:
			m.RunStarted(e.RunID, e.Provider, kind)
		case EventEnd:
			m.RunSettled(e.RunID, e.Provider, kind, e.StopReason)
		}
		return nil
	}
}

// invokeParams describes the invoke_agent span of a child of provider
// name: a CLIENT span when the provider's children run in another process.
func (s *Service) invokeParams(name, conversationID string) telemetry.InvokeParams {
	remote := false
	if p, ok := s.Provider(name); ok {
		remote = !p.Capabilities().Local
	}
	return telemetry.InvokeParams{Agent: name, Remote: remote, ConversationID: conversationID}
}

// activationTrace is the trace of a new activation of child id: a child
// of ctx's span (the followup's request or tool call), else — resumed with
// no caller in reach, after a restart or on another replica — of the span
// its first run row kept, read only when traces are recorded.
func (m *Manager) activationTrace(ctx context.Context, id string) runTrace {
	if tp := telemetry.Traceparent(ctx); tp != "" || !telemetry.Recording() {
		return runTrace{parent: tp}
	}
	runs, err := m.store.ListRuns(ctx, store.RunFilter{ChildID: id, Limit: 1})
	if err != nil || len(runs) == 0 {
		return runTrace{}
	}
	return runTrace{parent: runs[0].Traceparent}
}
