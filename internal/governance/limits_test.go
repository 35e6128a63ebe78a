package governance

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// TestNarrowed: the limits in force are the minimum, field by field, of
// the two; an unset field takes the other's, and neither input changes.
func TestNarrowed(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	d := func(v time.Duration) *time.Duration { return &v }
	early, late := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	a := store.Limits{MaxDepth: n(3), MaxChildren: n(10), TokenBudget: n(500), Deadline: &late, IdleTimeout: d(time.Minute)}
	b := store.Limits{MaxDepth: n(5), MaxChildren: n(2), MaxConcurrent: n(4), Deadline: &early, IdleTimeout: d(time.Hour)}
	got := narrowed(a, b)
	if *got.MaxDepth != 3 || *got.MaxChildren != 2 || *got.MaxConcurrent != 4 || *got.TokenBudget != 500 ||
		!got.Deadline.Equal(early) || *got.IdleTimeout != time.Minute {
		t.Fatalf("narrowed %+v", got)
	}
	*got.MaxDepth, *got.MaxConcurrent, *got.Deadline = 99, 99, late.Add(time.Hour)
	if *a.MaxDepth != 3 || *b.MaxConcurrent != 4 || !b.Deadline.Equal(early) {
		t.Fatalf("narrowed shares its inputs' fields: a %+v, b %+v", a, b)
	}
	if got := narrowed(store.Limits{}, store.Limits{}); !got.IsZero() {
		t.Fatalf("narrowed of none %+v", got)
	}
}

// staleLimits is a memstore whose first SessionLimits answers what it
// held before another writer's change: the read of a replica whose cache
// has not heard of that change yet.
type staleLimits struct {
	*memstore.Store
	stale *store.Limits
}

func (s *staleLimits) SessionLimits(ctx context.Context, id string) (store.Limits, error) {
	if l := s.stale; l != nil {
		s.stale = nil
		return *l, nil
	}
	return s.Store.SessionLimits(ctx, id)
}

// TestPatch_DoesNotOverwriteAChangeItDidNotRead: a patch made where the
// root's limits read as they were before another writer changed them keeps
// that change: its write changes only the limits it names.
func TestPatch_DoesNotOverwriteAChangeItDidNotRead(t *testing.T) {
	ctx := t.Context()
	mem := memstore.New()
	if err := mem.CreateSession(ctx, store.Session{ID: "root", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	before := store.Limits{}
	// Another replica sets a depth limit; this one still reads none.
	if err := mem.SetSessionLimits(ctx, "root", store.Limits{MaxDepth: new(int64(2))}); err != nil {
		t.Fatal(err)
	}
	l := NewLimits(&staleLimits{Store: mem, stale: &before}, slog.New(slog.DiscardHandler))
	if _, err := l.Patch(ctx, "root", LimitsPatch{Set: subagent.Limits{TokenBudget: new(int64(100))}}); err != nil {
		t.Fatal(err)
	}
	got, err := mem.SessionLimits(ctx, "root")
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxDepth == nil || *got.MaxDepth != 2 || got.TokenBudget == nil || *got.TokenBudget != 100 {
		t.Fatalf("limits after the patch: depth %v, budget %v; want 2 and 100", deref(got.MaxDepth), deref(got.TokenBudget))
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
