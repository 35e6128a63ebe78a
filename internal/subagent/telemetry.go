package subagent

import (
	"context"

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
func (s *Service) InvokeParams(name, conversationID string) telemetry.InvokeParams {
	remote := false
	if p, ok := s.Provider(name); ok {
		remote = !p.Capabilities().Local
	}
	return telemetry.InvokeParams{Agent: name, Remote: remote, ConversationID: conversationID}
}
