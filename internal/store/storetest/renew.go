package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// RenewStore is a store for the tests of a lease keeper: its RenewLeases
// reports each call on Calls and fails while Fail is set. Set both before
// the store is used.
type RenewStore struct {
	store.Store
	// Fail makes RenewLeases fail as if the database were unreachable.
	Fail bool
	// Calls, if not nil, receives a value per call of RenewLeases that
	// finds room in it or a reader waiting; the call does not wait.
	Calls chan struct{}
}

// RenewLeases reports the call, then fails or renews through the wrapped
// store.
func (s *RenewStore) RenewLeases(ctx context.Context, owner string, until time.Time) error {
	select {
	case s.Calls <- struct{}{}:
	default:
	}
	if s.Fail {
		return errors.New("database unreachable")
	}
	return s.Store.RenewLeases(ctx, owner, until)
}
