package memstore

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// maxSignins bounds the sign-ins the in-memory store keeps; beyond it
// CreateSignin ends the expired ones and, if none had expired, the oldest.
const maxSignins = 10000

// signins are the browser sign-ins, by hash, under a lock of their own:
// they never take part in the other tables' transactions.
type signins struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]store.Signin
}

// CreateSignin stores sg. Returns store.ErrConflict if its hash is stored.
func (s *Store) CreateSignin(_ context.Context, sg store.Signin) error {
	t := &s.signins
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[sg.Hash]; ok {
		return fmt.Errorf("memstore: create sign-in: %w", store.ErrConflict)
	}
	if t.byID == nil {
		t.byID = map[[sha256.Size]byte]store.Signin{}
	}
	if len(t.byID) >= maxSignins {
		t.evict(time.Now())
	}
	sg.Expires = sg.Expires.UTC()
	t.byID[sg.Hash] = sg
	return nil
}

// evict drops expired sign-ins, and the oldest one if none had expired;
// t.mu is held.
func (t *signins) evict(now time.Time) {
	var oldest [sha256.Size]byte
	var oldestExp time.Time
	for k, v := range t.byID {
		if !v.Expires.After(now) {
			delete(t.byID, k)
			continue
		}
		if oldestExp.IsZero() || v.Expires.Before(oldestExp) {
			oldest, oldestExp = k, v.Expires
		}
	}
	if len(t.byID) >= maxSignins {
		delete(t.byID, oldest)
	}
}

// GetSignin returns the sign-in of hash if it expires after now. Returns
// store.ErrNotFound.
func (s *Store) GetSignin(_ context.Context, hash [sha256.Size]byte, now time.Time) (store.Signin, error) {
	t := &s.signins
	t.mu.Lock()
	defer t.mu.Unlock()
	sg, ok := t.byID[hash]
	if !ok || !sg.Expires.After(now) {
		return store.Signin{}, fmt.Errorf("memstore: sign-in: %w", store.ErrNotFound)
	}
	return sg, nil
}

// DeleteSignin ends the sign-in of hash.
func (s *Store) DeleteSignin(_ context.Context, hash [sha256.Size]byte) error {
	t := &s.signins
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byID, hash)
	return nil
}

// SweepSignins deletes the sign-ins that expired before before.
func (s *Store) SweepSignins(_ context.Context, before time.Time) (int64, error) {
	t := &s.signins
	t.mu.Lock()
	defer t.mu.Unlock()
	return sweep(t.byID, func(v store.Signin) bool { return v.Expires.Before(before) }), nil
}
