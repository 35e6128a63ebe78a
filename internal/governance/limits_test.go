package governance

import (
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
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
