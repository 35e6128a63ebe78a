package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// ReserveIdempotency records key in flight for hash unless the tenant has
// it (then it returns the record, reserved false); an in-flight record
// created before staleBefore is replaced.
func (s *Store) ReserveIdempotency(ctx context.Context, key, hash string, staleBefore time.Time) (store.Idempotency, bool, error) {
	k := [2]string{store.Tenant(ctx), key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.idem[k]; ok && (rec.Status != 0 || !rec.CreatedAt.Before(staleBefore)) {
		return cloneIdem(rec), false, nil
	}
	rec := store.Idempotency{Key: key, RequestHash: hash, CreatedAt: stamp(time.Time{})}
	if s.idem == nil {
		s.idem = map[[2]string]store.Idempotency{}
	}
	s.idem[k] = rec
	return cloneIdem(rec), true, nil
}

// CompleteIdempotency stores the answer of key's reservation. Returns
// store.ErrNotFound or store.ErrConflict.
func (s *Store) CompleteIdempotency(ctx context.Context, key string, status int, response json.RawMessage) error {
	if err := checkJSON(response); err != nil {
		return fmt.Errorf("memstore: complete idempotency key: %w", err)
	}
	k := [2]string{store.Tenant(ctx), key}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.idem[k]
	switch {
	case !ok:
		return fmt.Errorf("memstore: complete idempotency key: %w", store.ErrNotFound)
	case rec.Status != 0:
		return fmt.Errorf("memstore: complete idempotency key: %w", store.ErrConflict)
	}
	rec.Status, rec.Response = status, cloneJSON(response)
	s.idem[k] = rec
	return nil
}

// ReleaseIdempotency drops key's reservation while it is in flight.
func (s *Store) ReleaseIdempotency(ctx context.Context, key string) error {
	k := [2]string{store.Tenant(ctx), key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec, ok := s.idem[k]; ok && rec.Status == 0 {
		delete(s.idem, k)
	}
	return nil
}

// SweepIdempotency deletes the keys of every tenant created before before.
func (s *Store) SweepIdempotency(_ context.Context, before time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sweep(s.idem, func(rec store.Idempotency) bool { return rec.CreatedAt.Before(before) }), nil
}

// sweep deletes the entries of m that old reports and returns how many.
func sweep[K comparable, V any](m map[K]V, old func(V) bool) int64 {
	var n int64
	for k, v := range m {
		if old(v) {
			delete(m, k)
			n++
		}
	}
	return n
}

func cloneIdem(r store.Idempotency) store.Idempotency {
	r.Response = cloneJSON(r.Response)
	return r
}
