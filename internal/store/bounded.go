package store

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrUnavailable: the store cannot be reached, or did not answer within
// its call bound (docs/architecture.md §5: a request that needs the database gets a 503,
// never a hang). Stores wrap their connection failures in it.
var ErrUnavailable = errors.New("store unavailable")

// Bounded returns st with every call that takes a context bounded by d:
// a call still unanswered after d returns ErrUnavailable (its write may
// still commit, as after any lost answer). A bound that ends first because
// the caller's context ended is the caller's error, unchanged.
func Bounded(st Store, d time.Duration) Store { return &bounded{Store: st, d: d} }

// bounded's methods are one pattern, call or do: bound the call, check its error.
type bounded struct {
	Store
	d time.Duration
}

// call runs f with ctx bounded by b.d and checks its error.
func call[R any](b *bounded, ctx context.Context, f func(context.Context) (R, error)) (R, error) {
	c, cancel := context.WithTimeout(ctx, b.d)
	defer cancel()
	r, err := f(c)
	return r, b.check(ctx, c, err)
}

// do is call for a method that returns only an error.
func do(b *bounded, ctx context.Context, f func(context.Context) error) error {
	_, err := call(b, ctx, func(c context.Context) (struct{}, error) { return struct{}{}, f(c) })
	return err
}

// check turns the expiry of the call's own bound into ErrUnavailable.
func (b *bounded) check(parent, callCtx context.Context, err error) error {
	if err != nil && parent.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer within %v: %w", ErrUnavailable, b.d, err)
	}
	return err
}

func (b *bounded) DisposeSession(ctx context.Context, id string, at time.Time) (time.Time, error) {
	return call(b, ctx, func(c context.Context) (time.Time, error) { return b.Store.DisposeSession(c, id, at) })
}

func (b *bounded) Disposed(ctx context.Context, id string) (time.Time, error) {
	return call(b, ctx, func(c context.Context) (time.Time, error) { return b.Store.Disposed(c, id) })
}

func (b *bounded) SessionLimits(ctx context.Context, id string) (Limits, error) {
	return call(b, ctx, func(c context.Context) (Limits, error) { return b.Store.SessionLimits(c, id) })
}

func (b *bounded) SetSessionLimits(ctx context.Context, id string, l Limits) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.SetSessionLimits(c, id, l) })
}

func (b *bounded) PatchSessionLimits(ctx context.Context, id string, p LimitsPatch) (Limits, error) {
	return call(b, ctx, func(c context.Context) (Limits, error) { return b.Store.PatchSessionLimits(c, id, p) })
}

func (b *bounded) SetTreePaused(ctx context.Context, id string, paused bool) (bool, error) {
	return call(b, ctx, func(c context.Context) (bool, error) { return b.Store.SetTreePaused(c, id, paused) })
}

func (b *bounded) LockTree(ctx context.Context, root string) (func(), error) {
	return call(b, ctx, func(c context.Context) (func(), error) { return b.Store.LockTree(c, root) })
}

func (b *bounded) CreateSession(ctx context.Context, s Session) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.CreateSession(c, s) })
}

func (b *bounded) CreateSessionWithEvents(ctx context.Context, s Session, evs ...NewEvent) ([]Event, error) {
	return call(b, ctx, func(c context.Context) ([]Event, error) { return b.Store.CreateSessionWithEvents(c, s, evs...) })
}

func (b *bounded) GetSession(ctx context.Context, id string) (Session, error) {
	return call(b, ctx, func(c context.Context) (Session, error) { return b.Store.GetSession(c, id) })
}

func (b *bounded) ListSessions(ctx context.Context, f SessionFilter) ([]Session, error) {
	return call(b, ctx, func(c context.Context) ([]Session, error) { return b.Store.ListSessions(c, f) })
}

func (b *bounded) SearchSessions(ctx context.Context, f SearchFilter) ([]SessionHit, error) {
	return call(b, ctx, func(c context.Context) ([]SessionHit, error) { return b.Store.SearchSessions(c, f) })
}

func (b *bounded) AppendEvents(ctx context.Context, sessionID string, evs ...NewEvent) ([]Event, error) {
	return call(b, ctx, func(c context.Context) ([]Event, error) { return b.Store.AppendEvents(c, sessionID, evs...) })
}

func (b *bounded) Events(ctx context.Context, sessionID string, after int64, limit int) ([]Event, error) {
	return call(b, ctx, func(c context.Context) ([]Event, error) { return b.Store.Events(c, sessionID, after, limit) })
}

func (b *bounded) EventsBefore(ctx context.Context, sessionID string, before int64, limit int) ([]Event, error) {
	return call(b, ctx, func(c context.Context) ([]Event, error) { return b.Store.EventsBefore(c, sessionID, before, limit) })
}

func (b *bounded) LogTail(ctx context.Context, sessionID string, limit int) ([]Event, error) {
	return call(b, ctx, func(c context.Context) ([]Event, error) { return b.Store.LogTail(c, sessionID, limit) })
}

func (b *bounded) StartRun(ctx context.Context, r Run, start LifecycleEvent) (LifecycleEvent, error) {
	return call(b, ctx, func(c context.Context) (LifecycleEvent, error) { return b.Store.StartRun(c, r, start) })
}

func (b *bounded) EndRun(ctx context.Context, runID string, res RunResult, end LifecycleEvent) (LifecycleEvent, error) {
	return call(b, ctx, func(c context.Context) (LifecycleEvent, error) { return b.Store.EndRun(c, runID, res, end) })
}

func (b *bounded) StartRunWithSession(ctx context.Context, p StartRunParams) ([]Event, LifecycleEvent, error) {
	type out struct {
		log   []Event
		start LifecycleEvent
	}
	v, err := call(b, ctx, func(c context.Context) (out, error) {
		log, start, err := b.Store.StartRunWithSession(c, p)
		return out{log, start}, err
	})
	return v.log, v.start, err
}

func (b *bounded) EndRunWithEvents(ctx context.Context, p EndRunParams) (LifecycleEvent, []Event, error) {
	type out struct {
		end LifecycleEvent
		log []Event
	}
	v, err := call(b, ctx, func(c context.Context) (out, error) {
		end, log, err := b.Store.EndRunWithEvents(c, p)
		return out{end, log}, err
	})
	return v.end, v.log, err
}

func (b *bounded) DisposeRun(ctx context.Context, runID string) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.DisposeRun(c, runID) })
}

func (b *bounded) GetRun(ctx context.Context, runID string) (Run, error) {
	return call(b, ctx, func(c context.Context) (Run, error) { return b.Store.GetRun(c, runID) })
}

func (b *bounded) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	return call(b, ctx, func(c context.Context) ([]Run, error) { return b.Store.ListRuns(c, f) })
}

func (b *bounded) RenewLeases(ctx context.Context, owner string, until time.Time) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.RenewLeases(c, owner, until) })
}

func (b *bounded) ExpiredRuns(ctx context.Context, now time.Time) ([]Run, error) {
	return call(b, ctx, func(c context.Context) ([]Run, error) { return b.Store.ExpiredRuns(c, now) })
}

func (b *bounded) SessionUsage(ctx context.Context, id string, tree bool, now time.Time) ([]SessionUsage, error) {
	return call(b, ctx, func(c context.Context) ([]SessionUsage, error) { return b.Store.SessionUsage(c, id, tree, now) })
}

func (b *bounded) AppendLifecycle(ctx context.Context, e LifecycleEvent) (LifecycleEvent, error) {
	return call(b, ctx, func(c context.Context) (LifecycleEvent, error) { return b.Store.AppendLifecycle(c, e) })
}

func (b *bounded) Lifecycle(ctx context.Context, f LifecycleFilter) ([]LifecycleEvent, error) {
	return call(b, ctx, func(c context.Context) ([]LifecycleEvent, error) { return b.Store.Lifecycle(c, f) })
}

func (b *bounded) LastLifecycleID(ctx context.Context) (int64, error) {
	return call(b, ctx, func(c context.Context) (int64, error) { return b.Store.LastLifecycleID(c) })
}

func (b *bounded) Enqueue(ctx context.Context, m InboxMessage) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.Enqueue(c, m) })
}

func (b *bounded) Pending(ctx context.Context, childID string) ([]InboxMessage, error) {
	return call(b, ctx, func(c context.Context) ([]InboxMessage, error) { return b.Store.Pending(c, childID) })
}

func (b *bounded) Ack(ctx context.Context, childID string, ids ...string) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.Ack(c, childID, ids...) })
}

func (b *bounded) PendingChildren(ctx context.Context) ([]PendingChild, error) {
	return call(b, ctx, func(c context.Context) ([]PendingChild, error) { return b.Store.PendingChildren(c) })
}

func (b *bounded) ReserveIdempotency(ctx context.Context, key, hash string, staleBefore time.Time) (Idempotency, bool, error) {
	type r struct {
		rec      Idempotency
		reserved bool
	}
	v, err := call(b, ctx, func(c context.Context) (r, error) {
		rec, reserved, err := b.Store.ReserveIdempotency(c, key, hash, staleBefore)
		return r{rec, reserved}, err
	})
	return v.rec, v.reserved, err
}

func (b *bounded) CompleteIdempotency(ctx context.Context, key string, status int, response json.RawMessage) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.CompleteIdempotency(c, key, status, response) })
}

func (b *bounded) ReleaseIdempotency(ctx context.Context, key string) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.ReleaseIdempotency(c, key) })
}

func (b *bounded) SweepIdempotency(ctx context.Context, before time.Time) (int64, error) {
	return call(b, ctx, func(c context.Context) (int64, error) { return b.Store.SweepIdempotency(c, before) })
}

func (b *bounded) Ping(ctx context.Context) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.Ping(c) })
}

func (b *bounded) CreateSignin(ctx context.Context, s Signin) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.CreateSignin(c, s) })
}

func (b *bounded) GetSignin(ctx context.Context, hash [sha256.Size]byte, now time.Time) (Signin, error) {
	return call(b, ctx, func(c context.Context) (Signin, error) { return b.Store.GetSignin(c, hash, now) })
}

func (b *bounded) DeleteSignin(ctx context.Context, hash [sha256.Size]byte) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.DeleteSignin(c, hash) })
}

func (b *bounded) SweepSignins(ctx context.Context, before time.Time) (int64, error) {
	return call(b, ctx, func(c context.Context) (int64, error) { return b.Store.SweepSignins(c, before) })
}

func (b *bounded) ClaimResident(ctx context.Context, p ClaimParams) (Resident, bool, error) {
	type r struct {
		res     Resident
		claimed bool
	}
	v, err := call(b, ctx, func(c context.Context) (r, error) {
		res, claimed, err := b.Store.ClaimResident(c, p)
		return r{res, claimed}, err
	})
	return v.res, v.claimed, err
}

func (b *bounded) GetResident(ctx context.Context, sessionID string) (Resident, error) {
	return call(b, ctx, func(c context.Context) (Resident, error) { return b.Store.GetResident(c, sessionID) })
}

func (b *bounded) ReleaseResident(ctx context.Context, sessionID, owner string) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.ReleaseResident(c, sessionID, owner) })
}

func (b *bounded) ExpiredResidents(ctx context.Context, now time.Time) ([]Resident, error) {
	return call(b, ctx, func(c context.Context) ([]Resident, error) { return b.Store.ExpiredResidents(c, now) })
}

func (b *bounded) SendControl(ctx context.Context, c Control) error {
	return do(b, ctx, func(cc context.Context) error { return b.Store.SendControl(cc, c) })
}

func (b *bounded) Controls(ctx context.Context, owner string) ([]Control, error) {
	return call(b, ctx, func(c context.Context) ([]Control, error) { return b.Store.Controls(c, owner) })
}

func (b *bounded) AnswerControl(ctx context.Context, id string, answer json.RawMessage) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.AnswerControl(c, id, answer) })
}

func (b *bounded) GetControl(ctx context.Context, id string) (Control, error) {
	return call(b, ctx, func(c context.Context) (Control, error) { return b.Store.GetControl(c, id) })
}

func (b *bounded) DeleteControl(ctx context.Context, id string) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.DeleteControl(c, id) })
}

func (b *bounded) Driving(ctx context.Context, sessionIDs []string, now time.Time) (map[string]bool, error) {
	return call(b, ctx, func(c context.Context) (map[string]bool, error) { return b.Store.Driving(c, sessionIDs, now) })
}

func (b *bounded) SweepControls(ctx context.Context, before time.Time) (int64, error) {
	return call(b, ctx, func(c context.Context) (int64, error) { return b.Store.SweepControls(c, before) })
}

func (b *bounded) CreateWebhook(ctx context.Context, w Webhook) (Webhook, error) {
	return call(b, ctx, func(c context.Context) (Webhook, error) { return b.Store.CreateWebhook(c, w) })
}

func (b *bounded) GetWebhook(ctx context.Context, id string) (Webhook, error) {
	return call(b, ctx, func(c context.Context) (Webhook, error) { return b.Store.GetWebhook(c, id) })
}

func (b *bounded) ListWebhooks(ctx context.Context) ([]Webhook, error) {
	return call(b, ctx, func(c context.Context) ([]Webhook, error) { return b.Store.ListWebhooks(c) })
}

func (b *bounded) TaskWebhooks(ctx context.Context, taskID string) ([]Webhook, error) {
	return call(b, ctx, func(c context.Context) ([]Webhook, error) { return b.Store.TaskWebhooks(c, taskID) })
}

func (b *bounded) UpdateWebhook(ctx context.Context, id string, u WebhookUpdate) (Webhook, error) {
	return call(b, ctx, func(c context.Context) (Webhook, error) { return b.Store.UpdateWebhook(c, id, u) })
}

func (b *bounded) DeleteWebhook(ctx context.Context, id string) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.DeleteWebhook(c, id) })
}

func (b *bounded) ClaimWebhooks(ctx context.Context, p ClaimWebhooksParams) ([]Webhook, error) {
	return call(b, ctx, func(c context.Context) ([]Webhook, error) { return b.Store.ClaimWebhooks(c, p) })
}

func (b *bounded) AdvanceWebhook(ctx context.Context, p AdvanceWebhookParams) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.AdvanceWebhook(c, p) })
}

func (b *bounded) ReleaseWebhook(ctx context.Context, id, owner string) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.ReleaseWebhook(c, id, owner) })
}

func (b *bounded) WebhooksEnabled(ctx context.Context) (bool, error) {
	return call(b, ctx, b.Store.WebhooksEnabled)
}

func (b *bounded) WebhookBacklog(ctx context.Context, upTo int) (WebhookBacklog, error) {
	return call(b, ctx, func(c context.Context) (WebhookBacklog, error) { return b.Store.WebhookBacklog(c, upTo) })
}

func (b *bounded) AddWebhookDelivery(ctx context.Context, d WebhookDelivery) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.AddWebhookDelivery(c, d) })
}

func (b *bounded) WebhookDeliveries(ctx context.Context, f WebhookDeliveryFilter) ([]WebhookDelivery, error) {
	return call(b, ctx, func(c context.Context) ([]WebhookDelivery, error) { return b.Store.WebhookDeliveries(c, f) })
}

func (b *bounded) GetWebhookDelivery(ctx context.Context, webhookID, id string) (WebhookDelivery, error) {
	return call(b, ctx, func(c context.Context) (WebhookDelivery, error) { return b.Store.GetWebhookDelivery(c, webhookID, id) })
}

func (b *bounded) SweepWebhookDeliveries(ctx context.Context, before time.Time) (int64, error) {
	return call(b, ctx, func(c context.Context) (int64, error) { return b.Store.SweepWebhookDeliveries(c, before) })
}

// approvalWrite is the pair of values an approval write returns.
type approvalWrite struct {
	a Approval
	e LifecycleEvent
}

func (b *bounded) CreateApproval(ctx context.Context, a Approval, requested LifecycleEvent) (Approval, LifecycleEvent, error) {
	w, err := call(b, ctx, func(c context.Context) (approvalWrite, error) {
		a, e, err := b.Store.CreateApproval(c, a, requested)
		return approvalWrite{a, e}, err
	})
	return w.a, w.e, err
}

func (b *bounded) GetApproval(ctx context.Context, id string) (Approval, error) {
	return call(b, ctx, func(c context.Context) (Approval, error) { return b.Store.GetApproval(c, id) })
}

func (b *bounded) ListApprovals(ctx context.Context, f ApprovalFilter) ([]Approval, error) {
	return call(b, ctx, func(c context.Context) ([]Approval, error) { return b.Store.ListApprovals(c, f) })
}

func (b *bounded) CloseApproval(ctx context.Context, id string, cl ApprovalClose, ev LifecycleEvent) (Approval, LifecycleEvent, error) {
	w, err := call(b, ctx, func(c context.Context) (approvalWrite, error) {
		a, e, err := b.Store.CloseApproval(c, id, cl, ev)
		return approvalWrite{a, e}, err
	})
	return w.a, w.e, err
}

func (b *bounded) PendingApprovals(ctx context.Context) ([]Approval, error) {
	return call(b, ctx, func(c context.Context) ([]Approval, error) { return b.Store.PendingApprovals(c) })
}

func (b *bounded) CreateTreePolicy(ctx context.Context, p TreePolicy) error {
	return do(b, ctx, func(c context.Context) error { return b.Store.CreateTreePolicy(c, p) })
}

func (b *bounded) TreePolicy(ctx context.Context, rootID string) (TreePolicy, error) {
	return call(b, ctx, func(c context.Context) (TreePolicy, error) { return b.Store.TreePolicy(c, rootID) })
}
