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
// its call bound (DESIGN §5: a request that needs the database gets a 503,
// never a hang). Stores wrap their connection failures in it.
var ErrUnavailable = errors.New("store unavailable")

// Bounded returns st with every call that takes a context bounded by d:
// a call still unanswered after d returns ErrUnavailable (its write may
// still commit, as after any lost answer). A bound that ends first because
// the caller's context ended is the caller's error, unchanged.
func Bounded(st Store, d time.Duration) Store { return &bounded{Store: st, d: d} }

// bounded's methods are one pattern: bound the call, check its error.
type bounded struct {
	Store
	d time.Duration
}

// bound derives the context of one call.
func (b *bounded) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.d)
}

// check turns the expiry of the call's own bound into ErrUnavailable.
func (b *bounded) check(parent, call context.Context, err error) error {
	if err != nil && parent.Err() == nil && errors.Is(call.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: no answer within %v: %w", ErrUnavailable, b.d, err)
	}
	return err
}

func (b *bounded) CreateSession(ctx context.Context, s Session) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.CreateSession(c, s)
	return b.check(ctx, c, err)
}

func (b *bounded) CreateSessionWithEvents(ctx context.Context, s Session, evs ...NewEvent) (r0 []Event, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.CreateSessionWithEvents(c, s, evs...)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) GetSession(ctx context.Context, id string) (r0 Session, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.GetSession(c, id)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) ListSessions(ctx context.Context, f SessionFilter) (r0 []Session, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.ListSessions(c, f)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) AppendEvents(ctx context.Context, sessionID string, evs ...NewEvent) (r0 []Event, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.AppendEvents(c, sessionID, evs...)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) Events(ctx context.Context, sessionID string, after int64, limit int) (r0 []Event, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.Events(c, sessionID, after, limit)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) StartRun(ctx context.Context, r Run, start LifecycleEvent) (r0 LifecycleEvent, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.StartRun(c, r, start)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) EndRun(ctx context.Context, runID string, res RunResult, end LifecycleEvent) (r0 LifecycleEvent, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.EndRun(c, runID, res, end)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) DisposeRun(ctx context.Context, runID string) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.DisposeRun(c, runID)
	return b.check(ctx, c, err)
}

func (b *bounded) GetRun(ctx context.Context, runID string) (r0 Run, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.GetRun(c, runID)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) ListRuns(ctx context.Context, f RunFilter) (r0 []Run, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.ListRuns(c, f)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) RenewLeases(ctx context.Context, owner string, until time.Time) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.RenewLeases(c, owner, until)
	return b.check(ctx, c, err)
}

func (b *bounded) ExpiredRuns(ctx context.Context, now time.Time) (r0 []Run, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.ExpiredRuns(c, now)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) AppendLifecycle(ctx context.Context, e LifecycleEvent) (r0 LifecycleEvent, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.AppendLifecycle(c, e)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) Lifecycle(ctx context.Context, f LifecycleFilter) (r0 []LifecycleEvent, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.Lifecycle(c, f)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) LastLifecycleID(ctx context.Context) (r0 int64, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.LastLifecycleID(c)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) Enqueue(ctx context.Context, m InboxMessage) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.Enqueue(c, m)
	return b.check(ctx, c, err)
}

func (b *bounded) Pending(ctx context.Context, childID string) (r0 []InboxMessage, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.Pending(c, childID)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) Ack(ctx context.Context, childID string, ids ...string) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.Ack(c, childID, ids...)
	return b.check(ctx, c, err)
}

func (b *bounded) PendingChildren(ctx context.Context) (r0 []PendingChild, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.PendingChildren(c)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) ReserveIdempotency(ctx context.Context, key, hash string, staleBefore time.Time) (rec Idempotency, reserved bool, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	rec, reserved, err = b.Store.ReserveIdempotency(c, key, hash, staleBefore)
	return rec, reserved, b.check(ctx, c, err)
}

func (b *bounded) CompleteIdempotency(ctx context.Context, key string, status int, response json.RawMessage) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.CompleteIdempotency(c, key, status, response)
	return b.check(ctx, c, err)
}

func (b *bounded) ReleaseIdempotency(ctx context.Context, key string) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.ReleaseIdempotency(c, key)
	return b.check(ctx, c, err)
}

func (b *bounded) SweepIdempotency(ctx context.Context, before time.Time) (r0 int64, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.SweepIdempotency(c, before)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) Ping(ctx context.Context) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.Ping(c)
	return b.check(ctx, c, err)
}

func (b *bounded) CreateSignin(ctx context.Context, s Signin) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.CreateSignin(c, s)
	return b.check(ctx, c, err)
}

func (b *bounded) GetSignin(ctx context.Context, hash [sha256.Size]byte, now time.Time) (r0 Signin, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.GetSignin(c, hash, now)
	return r0, b.check(ctx, c, err)
}

func (b *bounded) DeleteSignin(ctx context.Context, hash [sha256.Size]byte) (err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	err = b.Store.DeleteSignin(c, hash)
	return b.check(ctx, c, err)
}

func (b *bounded) SweepSignins(ctx context.Context, before time.Time) (r0 int64, err error) {
	c, cancel := b.bound(ctx)
	defer cancel()
	r0, err = b.Store.SweepSignins(c, before)
	return r0, b.check(ctx, c, err)
}
