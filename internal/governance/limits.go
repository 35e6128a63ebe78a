package governance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Lifecycle types of a tree's budget: data {sessionId, rootSessionId,
// tokens, tokenBudget}, each appended once per flip of the tree's paused
// mark (store.TreeLimits.SetTreePaused).
const (
	EventTreePaused  = "tree/paused"
	EventTreeResumed = "tree/resumed"
)

// Waiting delivers what a session of a paused tree held back: the
// prompts a root's durable inbox kept (*roots.Manager, on the replica
// that drives the root), the followups of a continuable child that was not
// live (*children.Manager).
type Waiting interface {
	DeliverWaiting(ctx context.Context, id string) error
}

// maxAncestors bounds the walk from a session to its root: deeper than any
// tree the depth rules let grow, so a longer chain is a broken store.
const maxAncestors = 10_000

// LimitsStore is the part of store.Store the tree limits read and write.
type LimitsStore interface {
	store.SessionLister
	store.TreeLimits
	UsageStore
	GetSession(ctx context.Context, id string) (store.Session, error)
	AppendLifecycle(ctx context.Context, e store.LifecycleEvent) (store.LifecycleEvent, error)
	Pending(ctx context.Context, childID string) ([]store.InboxMessage, error)
}

// Limits holds a tree's limits and budget (docs/architecture.md §1): one
// object, stored with the root and narrowed, never widened, by each child
// that was started with limits of its own; the limits in force at a
// session are the minimum over it and its ancestors. Counts — children,
// live runs, tokens — are read from the store, so every replica agrees.
// It implements subagent.Governor. Safe for concurrent use.
type Limits struct {
	store LimitsStore
	log   *slog.Logger
	now   func() time.Time
	// roots and children are set once, by DeliverTo, before requests are
	// served.
	roots, children Waiting
}

var (
	_ subagent.Governor = (*Limits)(nil)
	_ agent.Gate        = (*Limits)(nil)
)

// NewLimits returns the tree limits over st; log receives the failures
// of marking a tree paused, which no caller waits for.
func NewLimits(st LimitsStore, log *slog.Logger) *Limits {
	return &Limits{store: st, log: log, now: time.Now}
}

// DeliverTo makes roots and children deliver what a tree's roots and
// continuable children held back once its budget is raised (Patch). Call
// it once, before requests are served: they are built after the service
// that asks Limits.
func (l *Limits) DeliverTo(roots, children Waiting) { l.roots, l.children = roots, children }

// Tree is the state of a tree's limits at one session.
type Tree struct {
	// Limits are the limits in force at the session.
	Limits store.Limits
	// Root is the header of the tree's root; zero when the session's
	// chain ends at a parent that is not stored.
	Root store.Session
	// Tokens are the input + output tokens of every model call of the
	// tree, LiveRuns its live runs and activations.
	Tokens   int64
	LiveRuns int64
}

// Exhausted reports whether the tree spent its token budget.
func (t Tree) Exhausted() bool {
	return t.Limits.TokenBudget != nil && t.Tokens >= *t.Limits.TokenBudget
}

// InForce returns the limits in force at sess.
func (l *Limits) InForce(ctx context.Context, sess store.Session) (store.Limits, error) {
	t, err := l.inForce(ctx, sess)
	return t.Limits, err
}

// AdmitChild is subagent.Governor's: it refuses a new child of parent
// past the tree's deadline (EDeadlineExceeded), once its budget is spent
// (EBudgetExhausted), when parent has maxChildren children already
// (ELimitExceeded) or the tree maxConcurrent live runs (ERateLimited).
// The child's own narrowing applies below it, not to its own admission.
func (l *Limits) AdmitChild(ctx context.Context, parent store.Session, narrow *subagent.Limits) (_ subagent.Admission, err error) {
	t, err := l.inForce(ctx, parent)
	if err != nil {
		return subagent.Admission{}, err
	}
	var a subagent.Admission
	// Counted limits are counted under the tree's admission lock, held
	// until the child's start committed (Admission.Release): two starts
	// never both pass one count, on one replica or several.
	if lim := t.Limits; lim.MaxChildren != nil || lim.MaxConcurrent != nil {
		root := t.Root.ID
		if root == "" {
			root = store.RootOf(parent)
		}
		if a.Release, err = l.store.LockTree(ctx, root); err != nil {
			return subagent.Admission{}, err
		}
		defer func() {
			if err != nil {
				a.Release()
			}
		}()
	}
	if narrow != nil {
		if a.Stored, err = narrow.Resolve(createdOf(t.Root, parent)); err != nil {
			return subagent.Admission{}, err
		}
	}
	lim := t.Limits
	if d := lim.MaxDepth; d != nil {
		a.MaxDepth = new(int(*d))
	}
	if d := lim.Deadline; d != nil && !l.now().Before(*d) {
		return subagent.Admission{}, subagent.Errorf(subagent.EDeadlineExceeded, "the tree's deadline %s has passed", d.Format(time.RFC3339))
	}
	if lim.TokenBudget != nil || lim.MaxConcurrent != nil {
		if err := l.count(ctx, &t); err != nil {
			return subagent.Admission{}, err
		}
	}
	if t.Exhausted() {
		l.pause(ctx, t)
		return subagent.Admission{}, subagent.Errorf(subagent.EBudgetExhausted,
			"the tree spent %d of its tokenBudget %d; raise it to resume", t.Tokens, *lim.TokenBudget)
	}
	if n := lim.MaxChildren; n != nil {
		kids, err := store.Children(ctx, l.store, parent.ID)
		if err != nil {
			return subagent.Admission{}, err
		}
		if int64(len(kids)) >= *n {
			return subagent.Admission{}, subagent.Errorf(subagent.ELimitExceeded, "session %s already has %d children, all its tree's maxChildren %d allows", parent.ID, len(kids), *n)
		}
	}
	if n := lim.MaxConcurrent; n != nil && t.LiveRuns >= *n {
		return subagent.Admission{}, subagent.Errorf(subagent.ERateLimited, "the tree already has %d live runs and activations, all its maxConcurrent %d allows", t.LiveRuns, *n)
	}
	return a, nil
}

// LimitsPatch changes a root's limits: Set's fields that are set replace
// the stored ones, and the fields Clear names (store.LimitNames) are removed.
type LimitsPatch struct {
	Set   subagent.Limits
	Clear []string
}

// Patch applies p to root session id's limits and returns the tree's
// state after it. Returns ESessionNotFound, and EInvalidRequest for a
// session that is not a root or an invalid value.
func (l *Limits) Patch(ctx context.Context, id string, p LimitsPatch) (Tree, error) {
	root, err := l.store.GetSession(ctx, id)
	if err != nil {
		return Tree{}, notFound(id, err)
	}
	if root.ParentID != "" {
		const msg = "limits are changed on the root of a tree; a child narrows them when it starts"
		return Tree{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: msg, Fields: map[string]string{"id": msg}}
	}
	set, err := p.Set.Resolve(root.CreatedAt)
	if err != nil {
		return Tree{}, err
	}
	next, err := l.apply(ctx, id, p.Clear, set)
	if err != nil {
		return Tree{}, err
	}
	t := Tree{Limits: next.Stored(), Root: root}
	if err := l.count(ctx, &t); err != nil {
		return Tree{}, err
	}
	if t.Exhausted() {
		l.pause(ctx, t)
		return t, nil
	}
	resumed, err := l.store.SetTreePaused(ctx, id, false)
	if err != nil {
		return Tree{}, fmt.Errorf("resume tree %s: %w", id, err)
	}
	if resumed {
		if err := l.announce(ctx, EventTreeResumed, t); err != nil {
			return Tree{}, err
		}
		l.deliver(ctx, id)
	}
	return t, nil
}

// apply clears the limits named by clear on root id and sets those of set
// over what is stored, in one write, and returns the result: a change
// made meanwhile, on any replica, to another limit is kept.
func (l *Limits) apply(ctx context.Context, id string, clear []string, set store.Limits) (store.Limits, error) {
	for _, name := range clear {
		if !slices.Contains(store.LimitNames, name) {
			return store.Limits{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "no limit named " + name,
				Fields: map[string]string{name: "is no limit"}}
		}
	}
	next, err := l.store.PatchSessionLimits(ctx, id, store.LimitsPatch{Clear: clear, Set: set})
	if err != nil {
		return store.Limits{}, notFound(id, err)
	}
	return next, nil
}

// deliver hands what the sessions of root's tree held back while it was
// paused to their agents (Waiting); a session whose delivery fails is
// logged, and its messages stay in its inbox for its next one. The
// agents outlive the request that resumed the tree: ctx keeps only its
// values.
func (l *Limits) deliver(ctx context.Context, root string) {
	ctx = context.WithoutCancel(ctx)
	rows, err := l.store.SessionUsage(ctx, root, true, l.now())
	if err != nil {
		l.log.WarnContext(ctx, "list a resumed tree", slog.String("root_session_id", root), slog.Any("error", err))
		return
	}
	for _, r := range rows {
		w := l.children
		if r.ParentID == "" {
			w = l.roots
		}
		if w == nil {
			continue
		}
		if pending, err := l.store.Pending(ctx, r.SessionID); err != nil || len(pending) == 0 {
			continue
		}
		if err := w.DeliverWaiting(ctx, r.SessionID); err != nil {
			l.log.WarnContext(ctx, "deliver what a paused tree held back", slog.String("session_id", r.SessionID), slog.Any("error", err))
		}
	}
}

// Step is agent.Gate's: before each model step of session id, the turn
// ends deadline_exceeded once its tree's deadline passed, and
// budget_exhausted once the tree spent its budget (the tree is then
// paused: EventTreePaused, once).
func (l *Limits) Step(ctx context.Context, id string) (*sessionlog.TurnReason, error) {
	t, err := l.at(ctx, id)
	if err != nil {
		return nil, err
	}
	if d := t.Limits.Deadline; d != nil && !l.now().Before(*d) {
		return &sessionlog.TurnReason{Kind: sessionlog.ReasonDeadlineExceeded,
			Message: "the tree's deadline " + d.Format(time.RFC3339) + " has passed"}, nil
	}
	if t.Limits.TokenBudget == nil {
		return nil, nil
	}
	if err := l.count(ctx, &t); err != nil {
		return nil, err
	}
	if !t.Exhausted() {
		return nil, nil
	}
	l.pause(ctx, t)
	return &sessionlog.TurnReason{Kind: sessionlog.ReasonBudgetExhausted,
		Message: fmt.Sprintf("the tree spent %d of its tokenBudget %d", t.Tokens, *t.Limits.TokenBudget)}, nil
}

// Bounds is agent.Gate's: a turn of session id ends at its tree's
// deadline, and after its tree's idleTimeout without an event.
func (l *Limits) Bounds(ctx context.Context, id string) (agent.TurnBounds, error) {
	t, err := l.at(ctx, id)
	if err != nil {
		return agent.TurnBounds{}, err
	}
	var b agent.TurnBounds
	if d := t.Limits.Deadline; d != nil {
		b.Deadline = *d
	}
	if d := t.Limits.IdleTimeout; d != nil {
		b.Idle = *d
	}
	return b, nil
}

// Deadline is the deadline in force at session id, zero for none: what an
// external agent's turn is held to (an ACP run ends deadline_exceeded at
// it, as an in-process turn does through Bounds).
func (l *Limits) Deadline(ctx context.Context, id string) (time.Time, error) {
	b, err := l.Bounds(ctx, id)
	return b.Deadline, err
}

// Paused reports whether the tree of session id spent the budget in force
// there: its root's prompts, and followups to its idle continuable
// children, then wait in their durable inboxes. Without a budget nothing
// is counted.
func (l *Limits) Paused(ctx context.Context, id string) (bool, error) {
	t, err := l.at(ctx, id)
	if err != nil || t.Limits.TokenBudget == nil {
		return false, err
	}
	if err := l.count(ctx, &t); err != nil {
		return false, err
	}
	if t.Exhausted() {
		l.pause(ctx, t)
	}
	return t.Exhausted(), nil
}

// pause marks the spent tree t paused and, when this call flipped the
// mark, announces EventTreePaused. A failure is logged, not the
// caller's: the tree is spent either way.
func (l *Limits) pause(ctx context.Context, t Tree) {
	if t.Root.ID == "" {
		return
	}
	paused, err := l.store.SetTreePaused(ctx, t.Root.ID, true)
	if err == nil && paused {
		err = l.announce(ctx, EventTreePaused, t)
	}
	if err != nil {
		l.log.WarnContext(ctx, "mark a spent tree paused", slog.String("root_session_id", t.Root.ID), slog.Any("error", err))
	}
}

// treeBudget is the data of EventTreePaused and EventTreeResumed.
type treeBudget struct {
	SessionID     string `json:"sessionId"`
	RootSessionID string `json:"rootSessionId"`
	Tokens        int64  `json:"tokens"`
	TokenBudget   *int64 `json:"tokenBudget,omitempty"`
}

// announce appends lifecycle event typ for tree t, whose parent and root
// are its root.
func (l *Limits) announce(ctx context.Context, typ string, t Tree) error {
	id := t.Root.ID
	payload, err := json.Marshal(treeBudget{SessionID: id, RootSessionID: id, Tokens: t.Tokens, TokenBudget: t.Limits.TokenBudget})
	if err != nil {
		return err
	}
	if _, err := l.store.AppendLifecycle(ctx, store.LifecycleEvent{Type: typ, ParentID: id, RootID: id, Time: l.now(), Payload: payload}); err != nil {
		return fmt.Errorf("announce %s of %s: %w", typ, id, err)
	}
	return nil
}

// at is inForce of session id. Returns ESessionNotFound.
func (l *Limits) at(ctx context.Context, id string) (Tree, error) {
	sess, err := l.store.GetSession(ctx, id)
	if err != nil {
		return Tree{}, notFound(id, err)
	}
	return l.inForce(ctx, sess)
}

// inForce returns the limits in force at sess and its tree's root: the
// minimum over sess's and its ancestors' narrowing and the root's current
// limits, read uncached.
func (l *Limits) inForce(ctx context.Context, sess store.Session) (Tree, error) {
	var t Tree
	cur := sess
	for range maxAncestors {
		if cur.ParentID == "" {
			own, err := l.store.SessionLimits(ctx, cur.ID)
			if err != nil {
				return Tree{}, fmt.Errorf("read the limits of root %s: %w", cur.ID, err)
			}
			t.Limits, t.Root = narrowed(t.Limits, own), cur
			return t, nil
		}
		t.Limits = narrowed(t.Limits, cur.Limits)
		next, err := l.store.GetSession(ctx, cur.ParentID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return t, nil // a parent that is not stored: no root to read
		case err != nil:
			return Tree{}, fmt.Errorf("read session %s: %w", cur.ParentID, err)
		}
		cur = next
	}
	return Tree{}, fmt.Errorf("session %s has more than %d ancestors", sess.ID, maxAncestors)
}

// count fills in t's counts from the store's sums of its root's tree.
func (l *Limits) count(ctx context.Context, t *Tree) error {
	if t.Root.ID == "" {
		return nil
	}
	rows, err := l.store.SessionUsage(ctx, t.Root.ID, true, l.now())
	if err != nil {
		return fmt.Errorf("read the usage of tree %s: %w", t.Root.ID, err)
	}
	t.Tokens, t.LiveRuns = 0, 0
	for _, r := range rows {
		t.Tokens += spent(r)
		t.LiveRuns += r.LiveRuns
	}
	return nil
}

// spent is the input + output tokens of one session's own model calls,
// also those of runs still running: a root's are its log's (it has no
// runs); a child's are its log's while an in-process agent writes them
// there step by step, its settled runs' when larger (an ACP agent reports
// its usage with the run's result only).
func spent(r store.SessionUsage) int64 {
	log := r.Log.InputTokens + r.Log.OutputTokens
	runs := r.Runs.InputTokens + r.Runs.OutputTokens
	if r.ParentID == "" {
		return log + runs
	}
	return max(log, runs)
}

// createdOf is when the tree of sess was created, from which a deadline
// given as a duration counts: its root's creation, sess's own when the
// root is not stored.
func createdOf(root, sess store.Session) time.Time {
	if root.ID != "" {
		return root.CreatedAt
	}
	return sess.CreatedAt
}

// narrowed returns the minimum of a and b, field by field; an unset field
// takes the other's.
func narrowed(a, b store.Limits) store.Limits {
	out := a.Clone()
	for _, f := range []struct{ dst, src **int64 }{
		{&out.MaxDepth, &b.MaxDepth}, {&out.MaxChildren, &b.MaxChildren},
		{&out.MaxConcurrent, &b.MaxConcurrent}, {&out.TokenBudget, &b.TokenBudget},
	} {
		*f.dst = minPtr(*f.dst, *f.src)
	}
	if b.Deadline != nil && (out.Deadline == nil || b.Deadline.Before(*out.Deadline)) {
		out.Deadline = new(*b.Deadline)
	}
	out.IdleTimeout = minPtr(out.IdleTimeout, b.IdleTimeout)
	return out
}

func minPtr[T int64 | time.Duration](a, b *T) *T {
	switch {
	case b == nil:
		return a
	case a == nil || *b < *a:
		return new(*b)
	}
	return a
}

// notFound maps the store's ErrNotFound for session id to ESessionNotFound.
func notFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return subagent.Errorf(subagent.ESessionNotFound, "session %q not found", id)
	}
	return fmt.Errorf("session %s: %w", id, err)
}
