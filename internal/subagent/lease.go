package subagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// ControlRetention is how long a control request stays stored: a live
// requester deletes its own once answered or given up on, so one older
// than this belongs to a requester that died waiting (docs/architecture.md §5).
const ControlRetention = time.Hour

// OwnerLostDiagnostic is the diagnostic of a run closed because the replica
// that owned it stopped renewing its lease (docs/architecture.md §5).
const OwnerLostDiagnostic = "owner lost: replica %q stopped renewing the run's lease"

// RecoverOwned closes the runs that an earlier incarnation of this replica
// (same Config.Owner) left running, and drops its resident leases: they
// died with it. Call it at start-up, before the first Start and before a
// children.Manager or roots.Manager is built; each such run gets its subagent/end (stop reason
// error) exactly once, also when several replicas recover at the same time.
func (s *Service) RecoverOwned(ctx context.Context) error {
	// A lease in the past marks every running run of this owner expired;
	// the reaper then closes them like any other orphan.
	if err := s.store.RenewLeases(ctx, s.owner, time.Unix(0, 0)); err != nil {
		return fmt.Errorf("expire runs of a previous %q: %w", s.owner, err)
	}
	now := time.Now()
	if err := s.reap(ctx, now); err != nil {
		return err
	}
	// The resident leases it left are released (no kind of resident agent
	// is registered yet); children.Manager.Recover and roots.Manager.Recover deliver what
	// their agents had not.
	return s.ctl.TakeOverLapsed(ctx, now)
}

// KeepLeases renews the leases of this replica's runs and closes the runs
// of replicas whose leases ran out, every third of the lease duration, until
// ctx is done. Each round is bounded by that third, so an unreachable
// database cannot stall it. It fences: once renewals have failed for more
// than half the lease (two missed rounds), the leases written at the last
// success lapse within a third of the lease, so this replica stops driving
// its live runs (cancels them) before another replica may take them over;
// their subagent/end is written once, by whichever replica gets there first.
//
// It also serves the control requests other replicas send this one
// (Control), and each round takes over the resident agents whose owner's
// lease lapsed, delivering their undelivered messages.
func (s *Service) KeepLeases(ctx context.Context) {
	served := make(chan struct{})
	go func() { defer close(served); s.ctl.Serve(ctx) }()
	defer func() { <-served }()
	tick := time.NewTicker(s.lease / 3)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if s.keepLeases(ctx, now) {
				renewed = now
			} else if now.Sub(renewed) > s.lease/2 {
				s.fence(ctx, renewed)
			}
		}
	}
}

// keepLeases runs one round of KeepLeases at now and reports whether the
// renewal succeeded.
func (s *Service) keepLeases(ctx context.Context, now time.Time) bool {
	rctx, cancel := context.WithTimeout(ctx, s.lease/3)
	defer cancel()
	err := s.store.RenewLeases(rctx, s.owner, now.Add(s.lease))
	if err != nil && ctx.Err() == nil {
		s.log.ErrorContext(ctx, "renew run leases", slog.Any("error", err))
	}
	if err := s.reap(rctx, now); err != nil && ctx.Err() == nil {
		s.log.ErrorContext(ctx, "close runs of lost replicas", slog.Any("error", err))
	}
	if err == nil {
		if _, err := s.store.SweepControls(rctx, now.Add(-ControlRetention)); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "sweep abandoned control requests", slog.Any("error", err))
		}
		// Deliveries of a takeover outlive the round's bound.
		if err := s.ctl.TakeOverLapsed(ctx, now); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "take over resident agents of lost replicas", slog.Any("error", err))
		}
	}
	return err == nil
}

// fence cancels every live run of this replica, whose lease (last renewed
// at renewed) is about to lapse, and stops driving its resident agents.
func (s *Service) fence(ctx context.Context, renewed time.Time) {
	s.ctl.Fence(ctx)
	s.mu.Lock()
	live := slices.Collect(maps.Values(s.runs))
	s.mu.Unlock()
	n := 0
	for _, h := range live {
		select {
		case <-h.Done():
		default:
			h.Cancel()
			n++
		}
	}
	if n > 0 {
		s.log.WarnContext(ctx, "run leases not renewed: stopped driving this replica's runs before another may take them over",
			slog.Int("runs", n), slog.Time("last_renewed", renewed), slog.Duration("lease", s.lease))
	}
}

// reap ends every run whose lease expired before now with stop reason
// error and the owner-lost diagnostic. A run another replica ended first
// (ErrConflict) is skipped: its end was the only one.
func (s *Service) reap(ctx context.Context, now time.Time) error {
	runs, err := s.store.ExpiredRuns(ctx, now)
	if err != nil {
		return fmt.Errorf("list expired runs: %w", err)
	}
	var errs []error
	for _, r := range runs {
		rctx := store.WithTenant(ctx, r.Tenant)
		end := Event{
			Type: EventEnd, RunID: r.ID, Provider: r.Provider, ID: r.ChildID, Local: r.Local,
			ParentID: r.ParentID, RootID: r.RootID, TaskID: r.TaskID, StopReason: StopError,
		}
		row, err := LifecycleRow(end, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		row, err = s.store.EndRun(rctx, r.ID, store.RunResult{
			StopReason: StopError, Output: []byte("[]"),
			Diagnostic: fmt.Sprintf(OwnerLostDiagnostic, r.Owner), EndedAt: now,
		}, row)
		switch {
		case errors.Is(err, store.ErrConflict):
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("close run %s of lost owner %q: %w", r.ID, r.Owner, err))
			continue
		}
		end.Seq = row.ID
		s.log.WarnContext(rctx, "closed run of a lost owner", slog.String("run_id", r.ID), slog.String("owner", r.Owner))
		s.bus.dispatch(rctx, end)
	}
	return errors.Join(errs...)
}

// Running reports which of the sessions ids are running: they are the
// child of a run or activation that is running and whose owner's lease is
// live (docs/architecture.md §5). It is the one definition of a child's activity — for
// /v1/sessions, /children and /v1/subagents/{id} alike — whichever replica
// answers, read from the runs table. Returns the store's error.
func Running(ctx context.Context, st store.Store, ids ...string) (map[string]bool, error) {
	running := map[string]bool{}
	if len(ids) == 0 {
		return running, nil
	}
	now := time.Now()
	for after := ""; ; {
		runs, err := st.ListRuns(ctx, store.RunFilter{ChildIDs: ids, State: store.StateRunning, AfterID: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("list running runs of %d sessions: %w", len(ids), err)
		}
		for _, r := range runs {
			if RunningAt(r, now) {
				running[r.ChildID] = true
			}
		}
		if len(runs) < 1000 {
			return running, nil
		}
		after = runs[len(runs)-1].ID
	}
}

// runningAt reports whether r is running at now: not settled, and its
// owner's lease not lapsed.
func RunningAt(r store.Run, now time.Time) bool {
	return r.State == store.StateRunning && r.LeaseUntil.After(now)
}
