package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The Manager across replicas (docs/architecture.md §5, see Control): a continuable
// child is driven by the replica holding its resident lease, claimed in
// the child's loop before an activation starts (resident.Group.Hold) and
// released by the loop once no activation is left. Requests for a
// child another replica drives go to it as control requests, answered by
// the same methods a local call runs.

// Control request ops of the Manager.
const (
	opFollowup        = "child.followup"
	opInterrupt       = "child.interrupt"
	opSteer           = "child.steer"
	opSteerRun        = "run.steer"
	opDeliver         = "child.deliver"
	opCancelRun       = "run.cancel"
	opDisposeRun      = "run.dispose"
	opCancelActivity  = "activation.cancel"
	opDisposeActivity = "activation.dispose"
)

type followupArgs struct {
	Parent string             `json:"parent"`
	Row    store.InboxMessage `json:"row"`
	Async  bool               `json:"async,omitempty"`
}

type steerArgs struct {
	RunID   string        `json:"runId"`
	Content []model.Block `json:"content"`
}

type deliverArgs struct {
	Row    store.InboxMessage `json:"row"`
	Waking bool               `json:"waking"`
}

// handle registers the Manager's control handlers and resident kind.
func (m *Manager) handle() {
	ctl := m.ctl
	ctl.AddResidents(m.children)
	ctl.Handle(opFollowup, func(ctx context.Context, _ string, raw json.RawMessage) (any, error) {
		var a followupArgs
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return m.followupRow(ctx, a.Parent, a.Row, a.Async)
	})
	ctl.Handle(opInterrupt, func(ctx context.Context, child string, raw json.RawMessage) (any, error) {
		var parent string
		if err := json.Unmarshal(raw, &parent); err != nil {
			return nil, err
		}
		return nil, m.Interrupt(ctx, parent, child)
	})
	ctl.Handle(opSteer, func(ctx context.Context, _ string, raw json.RawMessage) (any, error) {
		var a steerArgs
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return m.SteerActivation(ctx, a.RunID, a.Content)
	})
	ctl.Handle(opSteerRun, func(ctx context.Context, runID string, raw json.RawMessage) (any, error) {
		var a steerArgs
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return m.steerRun(ctx, runID, a.Content)
	})
	ctl.Handle(opDeliver, func(ctx context.Context, _ string, raw json.RawMessage) (any, error) {
		var a deliverArgs
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return nil, m.deliverRow(ctx, a.Row, a.Waking)
	})
	for op, dispose := range map[string]bool{opCancelRun: false, opDisposeRun: true, opCancelActivity: false, opDisposeActivity: true} {
		ctl.Handle(op, func(ctx context.Context, _ string, raw json.RawMessage) (any, error) {
			var runID string
			if err := json.Unmarshal(raw, &runID); err != nil {
				return nil, err
			}
			return nil, m.controlRun(ctx, runID, dispose)
		})
	}
}

// followupRow is Followup (FollowupAsync when async) of an
// accepted-to-be row: here when no other replica drives the child, else on
// the replica that does, which then also announces an async row's route.
// The row's id is kept across replicas, so a request retried after its
// owner was lost stores the message once.
func (m *Manager) followupRow(ctx context.Context, parent string, row store.InboxMessage, async bool) (FollowupResult, error) {
	return resident.Forward(ctx, m.ctl, row.ChildID, opFollowup, followupArgs{parent, row, async}, func() (FollowupResult, error) {
		return m.followup(ctx, parent, row, async)
	})
}

// deliverRow is deliverInbox of row (a notice or a report to a continuable
// parent), on the replica that drives the parent.
func (m *Manager) deliverRow(ctx context.Context, row store.InboxMessage, waking bool) error {
	_, err := resident.Forward(ctx, m.ctl, row.ChildID, opDeliver, deliverArgs{row, waking}, func() (struct{}, error) {
		return struct{}{}, m.deliver(ctx, row, waking)
	})
	return err
}

// StopRun is Service.CancelRun (dispose false) or Service.DisposeRun of
// a run the Service does not drive (subagent.Activations), sent to the
// run's driver.
func (m *Manager) StopRun(ctx context.Context, runID string, dispose bool) error {
	run, err := m.store.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return &subagent.Error{Code: subagent.ERunNotFound, Message: fmt.Sprintf("no run %q", runID), Err: err}
	}
	if err != nil {
		return fmt.Errorf("read run %s: %w", runID, err)
	}
	local := func() (struct{}, error) { return struct{}{}, m.controlRun(ctx, runID, dispose) }
	if run.State != store.StateRunning {
		_, err = local()
		return err
	}
	if run.Kind == store.KindActivation {
		op := map[bool]string{false: opCancelActivity, true: opDisposeActivity}[dispose]
		_, err = resident.Forward(ctx, m.ctl, run.ChildID, op, runID, local)
		return err
	}
	op := map[bool]string{false: opCancelRun, true: opDisposeRun}[dispose]
	_, err = resident.ForwardRun(ctx, m.ctl, run, op, runID, local)
	return err
}

// controlRun cancels or disposes run runID on this replica.
func (m *Manager) controlRun(ctx context.Context, runID string, dispose bool) error {
	if h, ok := m.svc.Run(ctx, runID); ok {
		if !dispose {
			h.Cancel()
			return nil
		}
		return h.Dispose(ctx)
	}
	act, err := m.liveRun(ctx, runID)
	if err != nil && subagent.ErrorCode(err) != subagent.ERunNotFound {
		return err
	}
	if act != nil {
		m.do(act.c.key, func(c *child) {
			if c.act == act && act.to(actInterrupted) {
				act.agent.Cancel(sessionlog.CauseUser, true)
			}
		})
		if !dispose {
			return nil
		}
		select {
		case <-act.done:
		case <-ctx.Done():
			return fmt.Errorf("dispose activation %s: %w", runID, ctx.Err())
		}
	}
	if !dispose {
		return nil // settled, or lost with its owner: the reaper closes it
	}
	err = m.store.DisposeRun(ctx, runID)
	if errors.Is(err, store.ErrConflict) {
		return subagent.Errorf(subagent.ERunNotFound, "run %s is running but no live replica drives it; it is closed once its lease lapses", runID)
	}
	if err != nil {
		return fmt.Errorf("dispose run %s: %w", runID, err)
	}
	return nil
}

// routeSteer is SteerActivation of a run this process does not drive —
// an activation, or a one-shot run — sent to the replica that does.
func (m *Manager) routeSteer(ctx context.Context, runID string, content []model.Block) (string, error) {
	run, err := m.store.GetRun(ctx, runID)
	if err != nil || run.State != store.StateRunning {
		return "", subagent.Errorf(subagent.ERunNotFound, "run %s is no live run", runID)
	}
	if run.Kind == store.KindOneShot {
		return resident.ForwardRun(ctx, m.ctl, run, opSteerRun, steerArgs{runID, content}, func() (string, error) {
			return m.steerRun(ctx, runID, content)
		})
	}
	return resident.Forward(ctx, m.ctl, run.ChildID, opSteer, steerArgs{runID, content}, func() (string, error) {
		return "", subagent.Errorf(subagent.ERunNotFound, "run %s is no live activation of any replica", runID)
	})
}

// steerRun steers live one-shot run runID of this process. Returns
// ERunNotFound when it has none, else RunHandle.Steer's errors.
func (m *Manager) steerRun(ctx context.Context, runID string, content []model.Block) (string, error) {
	h, ok := m.svc.Run(ctx, runID)
	if !ok {
		return "", subagent.Errorf(subagent.ERunNotFound, "run %s is no live run of any replica", runID)
	}
	return h.Steer(ctx, content)
}

// stop is the fence of c's loop (resident.Policy.Stop): the turn of a live
// activation stops, keeping its inbox, since this replica is about to lose
// its leases. The activation settles (its writes fail once another replica
// took the child over), and the messages it had not admitted stay in the
// durable inbox for the next owner.
func (m *Manager) stop(_ context.Context, c *child) {
	if act := c.act; act != nil && act.state < actSettling {
		if d, ok := act.agent.(subagent.Detacher); ok {
			act.detached = true
			d.Detach() // its work goes on, for the child's next driver
			return
		}
		act.agent.Cancel(sessionlog.CauseDisposed, true)
	}
}
