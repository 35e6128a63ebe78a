// Package spawn is the spawn provider (docs/seam.md §2): a one-shot
// in-process child with a fresh context, composed and run by the shared
// in-process driver.
package spawn

import (
	"context"

	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Name is the provider's registry name.
const Name = "spawn"

// Provider starts fresh in-process children. It keeps no state between
// starts and is safe for concurrent use.
type Provider struct {
	driver *inprocess.Driver
}

// New returns the spawn provider over d.
func New(d inprocess.Deps) subagent.Provider {
	return &Provider{driver: inprocess.NewDriver(d)}
}

// Name is "spawn".
func (p *Provider) Name() string { return Name }

// Description says what a spawn child is, for humans and models.
func (p *Provider) Description() string {
	return "In-process agent with a fresh context: it sees only the prompt it is given, " +
		"with the deployment's tools and model routes"
}

// Capabilities are all supported: the driver enforces an output schema, a
// depth limit, a tool filter and a persona (docs/seam.md §2); runs accept
// confirmed steering (subagent.Steerer), children can be continuable and
// cold-resumed, and are in-process agents with a local log.
func (p *Provider) Capabilities() subagent.Capabilities {
	return subagent.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true,
		Steer: true, Resume: true, Local: true}
}

// InheritsParentContext is false: the child starts with an empty log.
func (p *Provider) InheritsParentContext() bool { return false }

// Start creates and publishes a fresh child; see inprocess.Driver.Start for
// cancellation and errors.
func (p *Provider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	return p.driver.Start(ctx, req, nil)
}

var _ subagent.Preparer = (*Provider)(nil)

// Prepare composes a fresh child without storing it, for the service to
// store with its run in one write; see inprocess.Driver.Prepare.
func (p *Provider) Prepare(ctx context.Context, req subagent.ResolvedRequest) (subagent.PreparedChild, error) {
	c, err := p.driver.Prepare(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var _ subagent.ContinuableProvider = (*Provider)(nil)

// PrepareContinuable returns an empty spec: a continuable spawn child
// starts with a fresh log, like a one-shot one. The children.Manager builds
// its agent through inprocess.Materializer.
func (p *Provider) PrepareContinuable(context.Context, subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
	return subagent.ContinuableSpec{}, nil
}
