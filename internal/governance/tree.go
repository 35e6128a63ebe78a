// Package governance holds the rules that bound or stop a whole delegation
// tree: for now tree control — cancel every live run and
// activation below a session, and dispose a root's tree. It finds a
// tree's members in the store (sessions by parent, runs by parent), never
// in one process's memory, and stops each one through the path that
// reaches whichever replica drives it (resident.Control), so it works the
// same on one replica or several. Domain only: no HTTP, no SQL.
package governance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// EventTreeCancelled is the lifecycle type of a tree cancel: data
// {sessionId, cancelled}, appended once per Cancel.
const EventTreeCancelled = "tree/cancelled"

// DiagnosticCancelled is the diagnostic of every run and activation a tree
// cancel settles (stopReason aborted).
const DiagnosticCancelled = "cancelled by tree"

// Runs stops the runs and continuable children of a tree, on the replica
// that drives each; *children.Manager implements it.
type Runs interface {
	// CancelRunForTree cancels a live one-shot run or activation with
	// the diagnostic of its aborted end, returns once it settled, and
	// reports whether it was live and this call cancelled it.
	CancelRunForTree(ctx context.Context, runID, diagnostic string) (bool, error)
	// Dispose disposes continuable child childID of parentSessionID.
	Dispose(ctx context.Context, parentSessionID, childID string) error
}

// Roots stops and disposes root sessions' own agents; *roots.Manager
// implements it.
type Roots interface {
	// StopTurn stops a root's running turn and reports whether one ran.
	StopTurn(ctx context.Context, id string) (bool, error)
	// Dispose marks a root disposed and closes its agent.
	Dispose(ctx context.Context, id string) error
}

var _ Runs = (*children.Manager)(nil)

// TreesConfig configures Trees. Every field is required.
type TreesConfig struct {
	Store  store.Store
	Runs   Runs
	Roots  Roots
	Logger *slog.Logger
}

// Trees carries out tree control. Safe for concurrent use.
type Trees struct {
	st    store.Store
	runs  Runs
	roots Roots
	log   *slog.Logger
}

// NewTrees returns Trees for cfg.
func NewTrees(cfg TreesConfig) *Trees {
	return &Trees{st: cfg.Store, runs: cfg.Runs, roots: cfg.Roots, log: cfg.Logger}
}

// settleBound bounds how long a tree cancel waits for one run to settle
// after cancelling it; a run that takes longer is still counted and still
// settles.
const settleBound = 15 * time.Second

// parallel is how many runs a tree cancel stops, and how many children a
// tree dispose disposes, at once.
const parallel = 8

// passes bounds how often Cancel walks the tree again for runs started
// while it cancelled (a parent that delegated once more before it was
// stopped).
const passes = 3

// Cancel cancels the tree under session id (POST /v1/sessions/{id}/cancel):
// every live one-shot run and continuable activation below it — found in
// the store, on whichever replica drives it — settles exactly once,
// aborted, with diagnostic DiagnosticCancelled; the deepest are stopped
// first, so that no parent reacts to a child's end by delegating anew, and
// the tree is walked again (up to passes times) while a walk still found
// live runs. When id is a root with a running turn, that turn is stopped
// last (its agent is closed; the notices of the cancelled children are
// read by its next turn). It then appends EventTreeCancelled once, and
// returns how many runs, activations and root turns it stopped. Messages
// accepted later run normally: nothing is marked.
//
// The work is done to the end also when ctx ends (the client left): only
// its tenant is used. Returns ESessionNotFound for an unknown session.
func (t *Trees) Cancel(ctx context.Context, id string) (int, error) {
	ctx = context.WithoutCancel(ctx)
	sess, err := t.session(ctx, id)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for range passes {
		got, err := t.cancelPass(ctx, id)
		n += got
		if err != nil {
			errs = append(errs, err)
			break
		}
		if got == 0 {
			break
		}
	}
	if sess.ParentID == "" {
		stopped, err := t.roots.StopTurn(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("stop the turn of root %s: %w", id, err))
		}
		if stopped {
			n++
		}
	}
	if err := t.announce(ctx, sess, n); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// Dispose disposes root session id's tree (DELETE /v1/sessions/{id}): a
// tree Cancel, then every continuable child in the tree is disposed
// (deepest first; Runs.Dispose), then the root is (Roots.Dispose): later
// prompts get EDisposed. Idempotent: disposing again stops whatever was
// started since and answers the same. Returns ESessionNotFound, and
// EInvalidRequest for a child session (dispose it from its parent).
func (t *Trees) Dispose(ctx context.Context, id string) error {
	ctx = context.WithoutCancel(ctx)
	sess, err := t.session(ctx, id)
	if err != nil {
		return err
	}
	if sess.ParentID != "" {
		return subagent.Errorf(subagent.EInvalidRequest,
			"session %q is a child session: dispose it through its parent (DELETE /v1/subagents/{childId} or /v1/runs/{runId})", id)
	}
	if _, err := t.Cancel(ctx, id); err != nil {
		return err
	}
	levels, err := t.walk(ctx, id)
	if err != nil {
		return err
	}
	// A level's children are disposed together, the deepest level first.
	for _, level := range slices.Backward(levels) {
		err := fanOut(level, func(s store.Session) error {
			if s.Mode != subagent.ModeContinuable {
				return nil
			}
			if err := t.runs.Dispose(ctx, s.ParentID, s.ID); err != nil && subagent.ErrorCode(err) != subagent.ENotResumable {
				return fmt.Errorf("dispose child %s: %w", s.ID, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return t.roots.Dispose(ctx, id)
}

// session reads id's header. Returns ESessionNotFound.
func (t *Trees) session(ctx context.Context, id string) (store.Session, error) {
	sess, err := t.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Session{}, subagent.Errorf(subagent.ESessionNotFound, "session %q not found", id)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("read session %s: %w", id, err)
	}
	return sess, nil
}

// cancelPass walks the tree under id once and cancels every live run it
// finds, the runs of the deepest sessions first, and returns how many it
// stopped.
func (t *Trees) cancelPass(ctx context.Context, id string) (int, error) {
	levels, err := t.walk(ctx, id)
	if err != nil {
		return 0, err
	}
	n := 0
	// levels[0] is id itself: its runs are its direct children's.
	parents := append([][]store.Session{{{ID: id}}}, levels...)
	for _, level := range slices.Backward(parents) {
		var (
			mu   sync.Mutex
			live []store.Run
		)
		err := fanOut(level, func(s store.Session) error {
			runs, err := t.liveRuns(ctx, s.ID)
			mu.Lock()
			live = append(live, runs...)
			mu.Unlock()
			return err
		})
		if err != nil {
			return n, err
		}
		got, err := t.cancelRuns(ctx, live)
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// walk returns the sessions below id by depth: levels[0] its children,
// levels[1] theirs, and so on.
func (t *Trees) walk(ctx context.Context, id string) ([][]store.Session, error) {
	var levels [][]store.Session
	for frontier := []string{id}; len(frontier) > 0; {
		var next []store.Session
		for _, p := range frontier {
			kids, err := store.Children(ctx, t.st, p)
			if err != nil {
				return nil, err
			}
			next = append(next, kids...)
		}
		if len(next) == 0 {
			break
		}
		levels = append(levels, next)
		frontier = frontier[:0:0]
		for _, s := range next {
			frontier = append(frontier, s.ID)
		}
	}
	return levels, nil
}

// liveRuns lists the running runs and activations delegated by parent.
func (t *Trees) liveRuns(ctx context.Context, parent string) ([]store.Run, error) {
	var out []store.Run
	for after := ""; ; {
		page, err := t.st.ListRuns(ctx, store.RunFilter{ParentID: parent, State: store.StateRunning, AfterID: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("list live runs of %s: %w", parent, err)
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

// cancelRuns cancels runs, parallel at a time, and returns how many it
// stopped.
func (t *Trees) cancelRuns(ctx context.Context, runs []store.Run) (int, error) {
	var (
		mu sync.Mutex
		n  int
	)
	err := fanOut(runs, func(r store.Run) error {
		rctx, cancel := context.WithTimeout(ctx, settleBound)
		defer cancel()
		stopped, err := t.runs.CancelRunForTree(rctx, r.ID, DiagnosticCancelled)
		if stopped {
			mu.Lock()
			n++
			mu.Unlock()
		}
		if err != nil {
			return fmt.Errorf("cancel run %s: %w", r.ID, err)
		}
		return nil
	})
	return n, err
}

// fanOut runs f for every item, parallel at a time, and returns f's
// errors joined once every call returned.
func fanOut[T any](items []T, f func(T) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, parallel)
	for _, item := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(item); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// treeCancelled is the data of EventTreeCancelled.
type treeCancelled struct {
	SessionID     string `json:"sessionId"`
	RootSessionID string `json:"rootSessionId"`
	Cancelled     int    `json:"cancelled"`
}

// announce appends EventTreeCancelled for the tree under sess. Its parent
// is sess, so that a stream filtered by parentSessionId=sess.ID sees it
// with the ends of its children; its root is sess's tree's, as for every
// lifecycle event, so that a stream of the tree sees it too.
func (t *Trees) announce(ctx context.Context, sess store.Session, n int) error {
	id, root := sess.ID, store.RootOf(sess)
	payload, err := json.Marshal(treeCancelled{SessionID: id, RootSessionID: root, Cancelled: n})
	if err != nil {
		return err
	}
	_, err = t.st.AppendLifecycle(ctx, store.LifecycleEvent{Type: EventTreeCancelled, ParentID: id, RootID: root, Time: time.Now(), Payload: payload})
	if err != nil {
		return fmt.Errorf("announce the cancel of %s: %w", id, err)
	}
	return nil
}
