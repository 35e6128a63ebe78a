package subagent

import (
	"context"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// The surface a resident kind of child builds on (internal/children):
// the Service's store, replica identity, bus and admission, shared so that
// one-shot runs and activations count, publish and settle alike.

// Activations reaches the activations of continuable children, which the
// Service does not drive itself (internal/children implements it).
type Activations interface {
	// StopRun cancels (dispose false) or disposes live activation runID,
	// on whichever replica drives it; ERunNotFound when there is none.
	StopRun(ctx context.Context, runID string, dispose bool) error
}

// SetActivations makes CancelRun and DisposeRun reach the activations a
// routes to. Call it before serving.
func (s *Service) SetActivations(a Activations) { s.acts = a }

// Store returns the store the Service records runs in.
func (s *Service) Store() store.Store { return s.store }

// Owner returns this replica's id, the owner of the runs it records.
func (s *Service) Owner() string { return s.owner }

// LeaseDuration returns how long a run's lease lasts between renewals.
func (s *Service) LeaseDuration() time.Duration { return s.lease }

// Metrics returns the metric set runs are counted into (nil: none).
func (s *Service) Metrics() *telemetry.Metrics { return s.metrics }

// Draining reports whether Shutdown began: nothing new is admitted.
func (s *Service) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Dispatch hands e to the lifecycle listeners (Subscribe) once it is
// recorded.
func (s *Service) Dispatch(ctx context.Context, e Event) { s.bus.dispatch(ctx, e) }
