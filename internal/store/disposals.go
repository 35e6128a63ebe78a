package store

import (
	"context"
	"time"
)

// Disposals is the part of Store that keeps which sessions were disposed
// (DELETE /v1/subagents/{childId}, DELETE /v1/sessions/{id}): a disposed
// continuable child takes no more followups and a disposed root no more
// prompts, on every replica. The mark is not part of the header, which
// stores cache as immutable: readers ask Disposed, uncached.
type Disposals interface {
	// DisposeSession marks session id disposed at at, unless it is
	// already: the first mark is kept. It returns the time the session is
	// marked disposed at. Returns ErrNotFound.
	DisposeSession(ctx context.Context, id string, at time.Time) (time.Time, error)
	// Disposed returns when session id was disposed, the zero time when
	// it was not. Returns ErrNotFound.
	Disposed(ctx context.Context, id string) (time.Time, error)
}
