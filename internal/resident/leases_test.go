package resident

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// claims is a Claimer over a map: the durable leases of one replica, with
// other replicas' leases set by the test.
type claims struct {
	mu       sync.Mutex
	mine     map[string]bool
	theirs   map[string]bool
	released int
}

func newClaims() *claims { return &claims{mine: map[string]bool{}, theirs: map[string]bool{}} }

func (c *claims) Claim(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.theirs[id] {
		return fmt.Errorf("%w: %s", ErrHeldElsewhere, id)
	}
	c.mine[id] = true
	return nil
}

func (c *claims) Release(_ context.Context, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mine, id)
	c.released++
}

func (c *claims) holds(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mine[id]
}

// TestLeases_OnlyTheHolderReleases: a second kind asking for a held lease
// is refused and its release changes nothing; the holder's release gives
// the lease back, after which the other kind may take it.
func TestLeases_OnlyTheHolderReleases(t *testing.T) {
	t.Parallel()
	c := newClaims()
	l := NewLeases(c)
	k := Key{Tenant: "t", ID: "s"}
	ctx := t.Context()
	if err := l.Hold(ctx, k, "child"); err != nil {
		t.Fatal(err)
	}
	if err := l.Hold(ctx, k, "child"); err != nil {
		t.Fatalf("a second hold by the holder: %v", err)
	}
	if err := l.Hold(ctx, k, "root"); !errors.Is(err, ErrHeldByOtherKind) {
		t.Fatalf("hold by another kind: %v", err)
	}
	l.Release(ctx, k, "root")
	if !c.holds("s") || l.Holder(k) != "child" {
		t.Fatalf("another kind's release took the lease: durable %v, holder %q", c.holds("s"), l.Holder(k))
	}
	if err := l.Reclaim(ctx, k, "root"); !errors.Is(err, ErrHeldByOtherKind) {
		t.Fatalf("reclaim by another kind: %v", err)
	}
	l.Release(ctx, k, "child")
	if c.holds("s") || l.Holder(k) != "" {
		t.Fatalf("after the holder's release: durable %v, holder %q", c.holds("s"), l.Holder(k))
	}
	if err := l.Hold(ctx, k, "root"); err != nil {
		t.Fatalf("hold after release: %v", err)
	}
}

// TestLeases_HeldElsewhereAndPass: a lease another replica holds is
// refused and not recorded here; a lease passed from one holder to
// another is released only by the new holder, without a second claim.
func TestLeases_HeldElsewhereAndPass(t *testing.T) {
	t.Parallel()
	c := newClaims()
	l := NewLeases(c)
	ctx := t.Context()
	other := Key{ID: "other"}
	c.theirs["other"] = true
	if err := l.Hold(ctx, other, "child"); !errors.Is(err, ErrHeldElsewhere) {
		t.Fatalf("hold of a lease held elsewhere: %v", err)
	}
	if l.Holder(other) != "" {
		t.Fatalf("a refused claim left holder %q", l.Holder(other))
	}

	k := Key{ID: "lapsed"}
	if err := l.Hold(ctx, k, "takeover"); err != nil {
		t.Fatal(err)
	}
	if l.Pass(k, "root", "child") {
		t.Fatal("Pass from a holder that does not hold the lease")
	}
	if !l.Pass(k, "takeover", "child") {
		t.Fatal("Pass from the holder failed")
	}
	l.Release(ctx, k, "takeover")
	if !c.holds("lapsed") {
		t.Fatal("the former holder released a passed lease")
	}
	l.Release(ctx, k, "child")
	if c.holds("lapsed") || c.released != 1 {
		t.Fatalf("after the new holder's release: durable %v, releases %d", c.holds("lapsed"), c.released)
	}
}

// TestGroup_LoopReleasesItsLeaseBeforeAnswering: a loop that took its
// lease keeps it while its state drives the agent and gives it back, in
// the command that stopped driving, before Do returns.
func TestGroup_LoopReleasesItsLeaseBeforeAnswering(t *testing.T) {
	t.Parallel()
	c := newClaims()
	idle := func(s *counter) bool { return s.n == 0 }
	g := NewGroup(Policy[counter, error]{
		Kind: "counter", Leases: NewLeases(c),
		New:     func(key Key) *counter { return &counter{key: key} },
		Idle:    idle,
		Driving: func(s *counter) bool { return !idle(s) },
	})
	k := Key{ID: "a"}
	var err error
	g.Do(k, func(s *counter) {
		if err = g.Hold(t.Context(), s.key); err == nil {
			s.n = 1
		}
	})
	if err != nil || !c.holds("a") {
		t.Fatalf("hold: %v, durable %v", err, c.holds("a"))
	}
	g.Do(k, func(s *counter) { s.n = 0 })
	if c.holds("a") {
		t.Fatal("the lease outlived the command that stopped driving")
	}
}

// TestLeases_AKindTakesATakeoversLease: a request for an agent whose lease
// a takeover holds (its owner was lost; the takeover is still finding out
// which kind resumes it) drives the agent under that claim instead of
// being refused, and the takeover's own hand-over and release then change
// nothing.
func TestLeases_AKindTakesATakeoversLease(t *testing.T) {
	t.Parallel()
	c := newClaims()
	l := NewLeases(c)
	k := Key{Tenant: "t", ID: "s"}
	ctx := t.Context()
	if err := l.Hold(ctx, k, HolderTakeover); err != nil {
		t.Fatal(err)
	}
	if err := l.Hold(ctx, k, "child"); err != nil {
		t.Fatalf("a kind's hold of a lease a takeover holds: %v", err)
	}
	if l.Pass(k, HolderTakeover, "child") {
		t.Fatal("the takeover passed a lease it no longer holds")
	}
	l.Release(ctx, k, HolderTakeover)
	if !c.holds(k.ID) || l.Holder(k) != "child" {
		t.Fatalf("after the takeover's release: durable %v, holder %q; want the child's", c.holds(k.ID), l.Holder(k))
	}
	if err := l.Hold(ctx, k, "root"); !errors.Is(err, ErrHeldByOtherKind) {
		t.Fatalf("another kind's hold of the child's lease: %v", err)
	}
}
