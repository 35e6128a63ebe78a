package subagent_test

import (
	"context"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The continuation tests drive real agents; see subagent.NewTestAgent.
func init() {
	subagent.NewTestAgent = func(ctx context.Context, st store.Store, mdl model.Model, req subagent.MaterializeRequest) (subagent.ChildAgent, error) {
		return agent.New(ctx, agent.Config{ID: req.Session.ID, Store: st, Model: mdl,
			ModelName: req.Options.Model, MaxTokens: req.Options.MaxTokens, Persona: req.Descriptor.Persona})
	}
}
