// Package fork is the fork provider (docs/seam.md §2): a one-shot in-process
// child whose log starts with a copy of its parent's completed turns, so it
// knows the conversation so far. Composition and running are the shared
// in-process driver's.
package fork

import (
	"context"
	"errors"
	"fmt"

	"github.com/subagentd/subagentd/internal/providers/inprocess"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Name is the provider's registry name.
const Name = "fork"

// Provider starts children seeded with their parent's completed turns. It
// keeps no state between starts and is safe for concurrent use.
type Provider struct {
	driver *inprocess.Driver
	store  store.Store
}

// New returns the fork provider over d.
func New(d inprocess.Deps) subagent.Provider {
	return &Provider{driver: inprocess.NewDriver(d), store: d.Store}
}

// Name is "fork".
func (p *Provider) Name() string { return Name }

// Description says what a fork child is, for humans and models.
func (p *Provider) Description() string {
	return "In-process agent that starts from a copy of the parent's completed turns, " +
		"so it knows the conversation so far, and then works on its prompt"
}

// Capabilities are all supported, as for spawn (docs/seam.md §2).
func (p *Provider) Capabilities() subagent.Capabilities {
	return subagent.Capabilities{OutputSchema: true, DepthLimit: true, ToolFilter: true, Persona: true,
		Steer: true, Resume: true, Local: true}
}

// InheritsParentContext is true: the child sees the parent's completed
// turns.
func (p *Provider) InheritsParentContext() bool { return true }

// Start reads the parent's log, seeds the child with its balanced
// completed-turn prefix (R39–R41) and publishes it; a parent without a
// completed turn gets a child identical to a spawn child. The child's own
// turns are numbered after the seed's. See inprocess.Driver.Start for
// cancellation and the other errors; an unknown parent session is
// ESessionNotFound.
func (p *Provider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	return p.driver.Start(ctx, req, p.seed)
}

var _ subagent.Preparer = (*Provider)(nil)

// Prepare composes a child seeded as Start seeds it without storing it, for the service to
// store with its run in one write; see inprocess.Driver.Prepare.
func (p *Provider) Prepare(ctx context.Context, req subagent.ResolvedRequest) (subagent.PreparedChild, error) {
	c, err := p.driver.Prepare(ctx, req, p.seed)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var _ subagent.ContinuableProvider = (*Provider)(nil)

// PrepareContinuable seeds a continuable fork child like a one-shot one:
// with its parent's balanced completed-turn prefix, read now (R43). It
// writes nothing. Returns ESessionNotFound for an unknown parent.
func (p *Provider) PrepareContinuable(ctx context.Context, req subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
	seed, err := p.seed(ctx, req.Parent.Session)
	if err != nil {
		return subagent.ContinuableSpec{}, err
	}
	return subagent.ContinuableSpec{Seed: seed}, nil
}

// seed reads the whole parent log and returns its prefix.
func (p *Provider) seed(ctx context.Context, parent store.Session) ([]store.Event, error) {
	var log []store.Event
	for after := int64(-1); ; {
		page, err := p.store.Events(ctx, parent.ID, after, 1000)
		if errors.Is(err, store.ErrNotFound) {
			return nil, subagent.Errorf(subagent.ESessionNotFound, "parent session %q not found", parent.ID)
		}
		if err != nil {
			return nil, fmt.Errorf("read parent log %s: %w", parent.ID, err)
		}
		if len(page) == 0 {
			return Prefix(log), nil
		}
		log = append(log, page...)
		after = page[len(page)-1].Seq
	}
}

// Prefix is the balanced completed-turn prefix of a session log
// (docs/seam.md §8): events[0..k] where k is the index of the last turn/end. The turn
// still open — typically the one delegating — and everything after the
// last turn/end are excluded, so every turn, step and tool call in the
// prefix is closed. It returns nil when the log has no turn/end.
func Prefix(events []store.Event) []store.Event {
	for k := len(events) - 1; k >= 0; k-- {
		if events[k].Type == sessionlog.EventTurnEnd {
			return events[:k+1]
		}
	}
	return nil
}
