package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

var limitTests = []test{
	{"SessionLimits_CreatedWithTheHeaderAndReplaced", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		deadline := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
		created := store.Limits{MaxDepth: ptr[int64](2), MaxChildren: ptr[int64](3), MaxConcurrent: ptr[int64](4),
			TokenBudget: ptr[int64](5000), Deadline: &deadline, IdleTimeout: ptr(90 * time.Second)}
		root := store.Session{ID: "root", Cwd: "/w", CreatedAt: t0, Limits: created}
		ok(t, s.CreateSession(ctx, root))
		kid := child("kid", "root", sec(1))
		kid.Limits = store.Limits{MaxChildren: ptr[int64](1)}
		must(s.CreateSessionWithEvents(ctx, kid, numbered(1)...))(t)
		bare := child("bare", "root", sec(2))
		ok(t, s.CreateSession(ctx, bare))

		want := created.Stored()
		if !want.Deadline.Equal(deadline) || want.Deadline.Location() != time.UTC {
			t.Fatalf("Stored deadline = %v, want %v in UTC", want.Deadline, deadline)
		}
		same(t, "GetSession(root)", must(s.GetSession(ctx, "root"))(t).Limits, want, canonLimits)
		same(t, "SessionLimits(root)", must(s.SessionLimits(ctx, "root"))(t), want, canonLimits)
		same(t, "SessionLimits(kid)", must(s.SessionLimits(ctx, "kid"))(t), kid.Limits, canonLimits)
		same(t, "GetSession(kid)", must(s.GetSession(ctx, "kid"))(t).Limits, kid.Limits, canonLimits)
		same(t, "SessionLimits(bare)", must(s.SessionLimits(ctx, "bare"))(t), store.Limits{}, canonLimits)

		raised := store.Limits{TokenBudget: ptr[int64](9000)}
		ok(t, s.SetSessionLimits(ctx, "root", raised))
		same(t, "SessionLimits(root) after SetSessionLimits", must(s.SessionLimits(ctx, "root"))(t), raised, canonLimits)
		same(t, "SessionLimits(kid) after the root's changed", must(s.SessionLimits(ctx, "kid"))(t), kid.Limits, canonLimits)
		ok(t, s.SetSessionLimits(ctx, "root", store.Limits{}))
		same(t, "SessionLimits(root) cleared", must(s.SessionLimits(ctx, "root"))(t), store.Limits{}, canonLimits)
	}},
	{"PatchSessionLimits_ChangesOnlyWhatItNames", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		deadline := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
		created := store.Limits{MaxDepth: ptr[int64](2), Deadline: &deadline, IdleTimeout: ptr(90 * time.Second)}
		ok(t, s.CreateSession(ctx, store.Session{ID: "root", CreatedAt: t0, Limits: created}))
		want := created.Clone()
		want.TokenBudget = ptr[int64](100)
		got := must(s.PatchSessionLimits(ctx, "root", store.LimitsPatch{Set: store.Limits{TokenBudget: ptr[int64](100)}}))(t)
		same(t, "PatchSessionLimits(set tokenBudget)", got, want.Stored(), canonLimits)
		same(t, "SessionLimits(root) after the patch", must(s.SessionLimits(ctx, "root"))(t), want.Stored(), canonLimits)

		// Clear and set in one patch; what it does not name stays.
		want.MaxDepth, want.MaxChildren = nil, ptr[int64](3)
		got = must(s.PatchSessionLimits(ctx, "root", store.LimitsPatch{Clear: []string{store.LimitMaxDepth},
			Set: store.Limits{MaxChildren: ptr[int64](3)}}))(t)
		same(t, "PatchSessionLimits(clear maxDepth, set maxChildren)", got, want.Stored(), canonLimits)
		same(t, "SessionLimits(root) after the second patch", must(s.SessionLimits(ctx, "root"))(t), want.Stored(), canonLimits)

		_, err := s.PatchSessionLimits(ctx, "nope", store.LimitsPatch{})
		isErr(t, err, store.ErrNotFound, "PatchSessionLimits(unknown)")
		_, err = s.PatchSessionLimits(other(ctx), "root", store.LimitsPatch{Set: store.Limits{MaxDepth: ptr[int64](1)}})
		isErr(t, err, store.ErrNotFound, "PatchSessionLimits(other tenant)")
		same(t, "SessionLimits(root) after the other tenant's patch", must(s.SessionLimits(ctx, "root"))(t), want.Stored(), canonLimits)
	}},
	{"PatchSessionLimits_ConcurrentPatchesAllHold", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "root", CreatedAt: t0}))
		// Six writers at once, each setting a limit of its own: none undoes
		// another's, as a read-modify-write without a lock would.
		deadline := t0.Add(time.Hour)
		sets := []store.Limits{{MaxDepth: ptr[int64](1)}, {MaxChildren: ptr[int64](2)}, {MaxConcurrent: ptr[int64](3)},
			{TokenBudget: ptr[int64](4)}, {Deadline: &deadline}, {IdleTimeout: ptr(5 * time.Second)}}
		var wg sync.WaitGroup
		errs := make([]error, len(sets))
		for i, set := range sets {
			wg.Go(func() { _, errs[i] = s.PatchSessionLimits(ctx, "root", store.LimitsPatch{Set: set}) })
		}
		wg.Wait()
		for _, err := range errs {
			ok(t, err)
		}
		want := store.Limits{MaxDepth: ptr[int64](1), MaxChildren: ptr[int64](2), MaxConcurrent: ptr[int64](3),
			TokenBudget: ptr[int64](4), Deadline: &deadline, IdleTimeout: ptr(5 * time.Second)}
		same(t, "SessionLimits(root) after six concurrent patches", must(s.SessionLimits(ctx, "root"))(t), want.Stored(), canonLimits)
	}},
	{"SetTreePaused_ReportsEachFlipOnce", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "root", CreatedAt: t0}))
		for i, step := range []struct{ paused, changed bool }{{false, false}, {true, true}, {true, false}, {false, true}, {false, false}} {
			if got := must(s.SetTreePaused(ctx, "root", step.paused))(t); got != step.changed {
				t.Fatalf("step %d: SetTreePaused(%v) changed = %v, want %v", i, step.paused, got, step.changed)
			}
		}
		_, err := s.SetTreePaused(ctx, "nope", true)
		isErr(t, err, store.ErrNotFound, "SetTreePaused(unknown)")
		_, err = s.SetTreePaused(other(ctx), "root", true)
		isErr(t, err, store.ErrNotFound, "SetTreePaused(other tenant)")
		// Of concurrent flips to paused, one changes the mark.
		var wg sync.WaitGroup
		var changed atomic.Int32
		for range 8 {
			wg.Go(func() {
				if c, err := s.SetTreePaused(ctx, "root", true); err == nil && c {
					changed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := changed.Load(); n != 1 {
			t.Fatalf("%d of 8 concurrent SetTreePaused(true) changed the mark, want 1", n)
		}
	}},
	{"LockTree_OneHolderPerTreeAndTenant", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		unlock := must(s.LockTree(ctx, "root"))(t)
		// Another tree, and the same tree of another tenant, are free.
		must(s.LockTree(ctx, "other-root"))(t)()
		must(s.LockTree(other(ctx), "root"))(t)()
		// The held tree is not: a waiter gives up when its context ends.
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := s.LockTree(short, "root")
		cancel()
		if err == nil {
			t.Fatal("LockTree of a held tree returned before it was released")
		}
		// A waiter gets the lock once the holder lets go, and holders never
		// overlap.
		got := make(chan func(), 1)
		go func() {
			if u, err := s.LockTree(ctx, "root"); err == nil {
				got <- u
			} else {
				close(got)
			}
		}()
		unlock()
		u, ok := <-got
		if !ok {
			t.Fatal("the waiter did not get the released lock")
		}
		u()
		u() // a second unlock is harmless
		var wg sync.WaitGroup
		var inside atomic.Int32
		var overlap atomic.Bool
		for range 8 {
			wg.Go(func() {
				u, err := s.LockTree(ctx, "root")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlap.Store(true)
				}
				inside.Add(-1)
				u()
			})
		}
		wg.Wait()
		if overlap.Load() {
			t.Fatal("two callers held one tree's lock at once")
		}
	}},
	{"SessionLimits_UnknownOrOtherTenantIsNotFound", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "root", CreatedAt: t0, Limits: store.Limits{MaxDepth: ptr[int64](1)}}))
		_, err := s.SessionLimits(ctx, "nope")
		isErr(t, err, store.ErrNotFound, "SessionLimits(unknown)")
		isErr(t, s.SetSessionLimits(ctx, "nope", store.Limits{}), store.ErrNotFound, "SetSessionLimits(unknown)")
		_, err = s.SessionLimits(other(ctx), "root")
		isErr(t, err, store.ErrNotFound, "SessionLimits(other tenant)")
		isErr(t, s.SetSessionLimits(other(ctx), "root", store.Limits{}), store.ErrNotFound, "SetSessionLimits(other tenant)")
		same(t, "SessionLimits after another tenant's set", must(s.SessionLimits(ctx, "root"))(t),
			store.Limits{MaxDepth: ptr[int64](1)}, canonLimits)
	}},
}

func canonLimits(_ *testing.T, l store.Limits) store.Limits { return l }
