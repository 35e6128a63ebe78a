package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

var idempotencyTests = []test{
	{"ReserveThenReplay", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		rec, reserved, err := s.ReserveIdempotency(ctx, "k1", "h1", time.Now().Add(-time.Hour))
		if err != nil || !reserved || rec.RequestHash != "h1" || rec.Status != 0 {
			t.Fatalf("first reserve = %+v, %v, %v", rec, reserved, err)
		}
		rec, reserved, err = s.ReserveIdempotency(ctx, "k1", "h2", time.Now().Add(-time.Hour))
		if err != nil || reserved || rec.RequestHash != "h1" || rec.Status != 0 {
			t.Fatalf("reserve while in flight = %+v, %v, %v; want the first, in flight", rec, reserved, err)
		}
		if err := s.CompleteIdempotency(ctx, "k1", 201, []byte(`{"body":{"id":"x"}}`)); err != nil {
			t.Fatalf("complete: %v", err)
		}
		rec, reserved, err = s.ReserveIdempotency(ctx, "k1", "h1", time.Now().Add(time.Hour))
		if err != nil || reserved || rec.Status != 201 || string(canonJSON(t, rec.Response)) != `{"body":{"id":"x"}}` {
			t.Fatalf("reserve after completion = %+v, %v, %v; want the stored answer (never stale)", rec, reserved, err)
		}
		if err := s.CompleteIdempotency(ctx, "k1", 200, nil); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second completion = %v, want ErrConflict", err)
		}
		if err := s.CompleteIdempotency(ctx, "nope", 200, nil); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("completing an unknown key = %v, want ErrNotFound", err)
		}
	}},
	{"ReleaseAndStale", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		if _, ok, err := s.ReserveIdempotency(ctx, "k", "h1", time.Now().Add(-time.Hour)); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		if err := s.ReleaseIdempotency(ctx, "k"); err != nil {
			t.Fatalf("release: %v", err)
		}
		if _, ok, err := s.ReserveIdempotency(ctx, "k", "h2", time.Now().Add(-time.Hour)); err != nil || !ok {
			t.Fatalf("reserve after release: %v %v, want reserved", ok, err)
		}
		// An in-flight reservation older than staleBefore is taken over.
		rec, ok, err := s.ReserveIdempotency(ctx, "k", "h3", time.Now().Add(time.Hour))
		if err != nil || !ok || rec.RequestHash != "h3" {
			t.Fatalf("reserve over a stale reservation = %+v %v %v, want reserved with h3", rec, ok, err)
		}
		if err := s.CompleteIdempotency(ctx, "k", 204, nil); err != nil {
			t.Fatalf("complete: %v", err)
		}
		if err := s.ReleaseIdempotency(ctx, "k"); err != nil {
			t.Fatalf("release of an answered key: %v", err)
		}
		if rec, ok, err := s.ReserveIdempotency(ctx, "k", "h3", time.Now()); err != nil || ok || rec.Status != 204 {
			t.Fatalf("answered key after release = %+v %v %v, want kept", rec, ok, err)
		}
	}},
	{"TenantsAndSweep", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		stale := time.Now().Add(-time.Hour)
		if _, ok, err := s.ReserveIdempotency(ctx, "k", "mine", stale); err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		rec, ok, err := s.ReserveIdempotency(other(ctx), "k", "theirs", stale)
		if err != nil || !ok || rec.RequestHash != "theirs" {
			t.Fatalf("another tenant's reserve of the same key = %+v %v %v, want its own", rec, ok, err)
		}
		if err := s.CompleteIdempotency(other(ctx), "k", 201, nil); err != nil {
			t.Fatalf("complete: %v", err)
		}
		if rec, _, _ := s.ReserveIdempotency(ctx, "k", "mine", stale); rec.Status != 0 {
			t.Fatalf("the other tenant's answer leaked: %+v", rec)
		}
		n, err := s.SweepIdempotency(ctx, time.Now().Add(time.Minute))
		if err != nil || n != 2 {
			t.Fatalf("sweep = %d, %v; want both tenants' keys", n, err)
		}
		if _, ok, err := s.ReserveIdempotency(other(ctx), "k", "again", stale); err != nil || !ok {
			t.Fatalf("reserve after sweep: %v %v", ok, err)
		}
		if n, err := s.SweepIdempotency(ctx, time.Now().Add(-time.Minute)); err != nil || n != 0 {
			t.Fatalf("sweep of nothing old = %d, %v", n, err)
		}
	}},
	{"ConcurrentReserve", func(t *testing.T, s store.Store) {
		const n = 16
		var wg sync.WaitGroup
		won := make(chan bool, n)
		for range n {
			wg.Go(func() {
				_, ok, err := s.ReserveIdempotency(t.Context(), "race", "h", time.Now().Add(-time.Hour))
				if err != nil {
					t.Errorf("reserve: %v", err)
				}
				won <- ok
			})
		}
		wg.Wait()
		close(won)
		winners := 0
		for ok := range won {
			if ok {
				winners++
			}
		}
		if winners != 1 {
			t.Fatalf("%d concurrent reservations succeeded, want 1", winners)
		}
	}},
}
