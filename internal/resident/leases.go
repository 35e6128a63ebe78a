package resident

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Key identifies a resident agent across tenants.
type Key struct{ Tenant, ID string }

// Claimer keeps the durable side of resident leases (the store's
// resident table, through the cross-replica control of this replica).
type Claimer interface {
	// Claim makes this replica the holder of id's lease; it fails with an
	// error matching ErrHeldElsewhere when another replica holds it live.
	Claim(ctx context.Context, id string) error
	// Release gives up this replica's lease of id.
	Release(ctx context.Context, id string)
}

// ErrHeldElsewhere: another replica holds the resident agent's lease
// live, so this replica must not drive it.
var ErrHeldElsewhere = errors.New("resident agent is held by another replica")

// ErrHeldByOtherKind: within this process, a loop of another kind holds
// the resident agent's lease. A session is either a root or a child, so
// this is a request that named a session of the wrong kind.
var ErrHeldByOtherKind = errors.New("resident agent's lease is held by another kind in this process")

// HolderTakeover holds the lease of an agent whose owner was lost while
// the takeover finds out which kind resumes it. It is the one holder a kind
// may take a lease from: a request for the agent that arrives meanwhile
// drives it under the takeover's claim (and the takeover's Pass and Release
// then find the lease gone and do nothing).
const HolderTakeover = "takeover"

// Leases is the one registry of the resident leases this process holds,
// keyed by agent and knowing which holder (a kind of resident agent, or a
// takeover) holds each. A lease is claimed through the Claimer by the
// first holder and released only by the holder that holds it: two kinds
// that are asked about the same id can never release each other's lease.
// Safe for concurrent use; the store calls of one key are serialised, those
// of different keys are not.
type Leases struct {
	claimer Claimer

	mu   sync.Mutex
	held map[Key]*lease
}

// lease is one key's entry: mu serialises its store calls, holder is who
// holds it ("" while none does), refs counts the callers using the entry.
type lease struct {
	mu     sync.Mutex
	holder string
	refs   int
}

// NewLeases returns an empty registry over c.
func NewLeases(c Claimer) *Leases {
	return &Leases{claimer: c, held: map[Key]*lease{}}
}

// use returns key's entry, locked, for one caller; done gives it back.
func (l *Leases) use(key Key) *lease {
	l.mu.Lock()
	e := l.held[key]
	if e == nil {
		e = &lease{}
		l.held[key] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	return e
}

// done unlocks e, key's entry, and forgets it once nobody holds or uses it.
func (l *Leases) done(key Key, e *lease) {
	e.mu.Unlock()
	l.mu.Lock()
	if e.refs--; e.refs == 0 && e.holder == "" {
		delete(l.held, key)
	}
	l.mu.Unlock()
}

// Hold makes holder the holder of key's lease, claiming it first unless
// holder holds it already, or taking it from HolderTakeover. Returns
// ErrHeldByOtherKind when another holder of this process holds it, and the
// Claimer's error (ErrHeldElsewhere when another replica holds it live). A
// nil registry holds nothing (a single process without leases).
func (l *Leases) Hold(ctx context.Context, key Key, holder string) error {
	if l == nil {
		return nil
	}
	e := l.use(key)
	defer l.done(key, e)
	switch e.holder {
	case holder:
		return nil
	case HolderTakeover:
		e.holder = holder // claimed by the takeover already
		return nil
	case "":
	default:
		return fmt.Errorf("%w: %s holds %s", ErrHeldByOtherKind, e.holder, key.ID)
	}
	if err := l.claimer.Claim(ctx, key.ID); err != nil {
		return err
	}
	e.holder = holder
	return nil
}

// Release gives up key's lease if holder holds it; otherwise it does
// nothing.
func (l *Leases) Release(ctx context.Context, key Key, holder string) {
	if l == nil {
		return
	}
	e := l.use(key)
	defer l.done(key, e)
	if e.holder != holder {
		return
	}
	e.holder = ""
	l.claimer.Release(ctx, key.ID)
}

// Reclaim claims key's lease again for holder, which holds it here: its
// durable side was lost (a write found itself fenced). Returns
// ErrHeldByOtherKind when holder does not hold it, and the Claimer's error.
func (l *Leases) Reclaim(ctx context.Context, key Key, holder string) error {
	if l == nil {
		return nil
	}
	e := l.use(key)
	defer l.done(key, e)
	if e.holder != holder {
		return fmt.Errorf("%w: %q does not hold %s", ErrHeldByOtherKind, holder, key.ID)
	}
	return l.claimer.Claim(ctx, key.ID)
}

// Pass hands key's lease from holder from to holder to without a store
// call; it reports whether from held it.
func (l *Leases) Pass(key Key, from, to string) bool {
	if l == nil {
		return false
	}
	e := l.use(key)
	defer l.done(key, e)
	if e.holder != from {
		return false
	}
	e.holder = to
	return true
}

// Holder returns who holds key's lease in this process, "" for nobody.
func (l *Leases) Holder(key Key) string {
	if l == nil {
		return ""
	}
	e := l.use(key)
	defer l.done(key, e)
	return e.holder
}
