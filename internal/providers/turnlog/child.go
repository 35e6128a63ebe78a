package turnlog

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Child is the live agent of one activation of a continuable external
// child, as far as its protocol does not shape it: its log, its turns,
// one at a time, and the followups queued behind the running one. Neither
// ACP nor A2A takes content mid-turn, so a followup during a turn runs as
// the next turn. A provider's live agent embeds the *Child that NewChild
// makes for it; with Kept's methods, Child's make most of a
// subagent.ChildAgent.
//
// Its lock (Lock, Unlock) guards its state and the embedding agent's
// turn state, and serialises log writes.
type Child struct {
	sync.Mutex
	// Kept (which locks itself) holds the user/messages and the fold since
	// Track; its Events, Track and Outcome are the agent's.
	Kept
	// ID is the child session's id; Log carries it.
	ID  string
	Log *slog.Logger
	// LogCtx is the child's tenant, without cancellation: the log's
	// writes outlive the request that made the agent.
	LogCtx context.Context

	store Store
	name  string // the protocol's, in errors
	turns Turns

	turn    int // the last turn number in the log
	queue   []sessionlog.UserMessage
	running bool          // a turn runs or is about to
	idle    chan struct{} // closed while no turn runs
	closed  bool
}

// Turns opens and runs the turns of a Child: its protocol's side.
type Turns interface {
	// OpenTurn makes turn n, which runs msg and whose opening the log
	// holds, the running turn. The lock is held.
	OpenTurn(n int, msg sessionlog.UserMessage)
	// RunTurn runs the running turn, without the lock, and ends it
	// (CloseTurnLocked, NextLocked); it reports whether a next turn
	// opened.
	RunTurn() bool
}

// ChildParams are what NewChild makes a Child of.
type ChildParams struct {
	Store Store
	ID    string
	// Name is the protocol's, for errors ("ACP").
	Name string
	// Log receives diagnostics; the Child's names the child.
	Log   *slog.Logger
	Turns Turns
}

// NewChild returns the Child of p's agent, idle. It keeps ctx's values
// (the tenant), not its cancellation.
func NewChild(ctx context.Context, p ChildParams) *Child {
	idle := make(chan struct{})
	close(idle)
	return &Child{
		ID: p.ID, Log: p.Log.With(slog.String("child_id", p.ID)), LogCtx: context.WithoutCancel(ctx),
		store: p.Store, name: p.Name, turns: p.Turns, idle: idle,
	}
}

// Load reads the child log, a page at a time, for its turn count and its
// user/messages, calling each, if not nil, with every event (Scan). It
// returns the turn a crash left open, 0 when every turn ended; call it
// before the Child is shared.
func (c *Child) Load(ctx context.Context, each func(store.Event)) (open int, err error) {
	read := func(ctx context.Context, after int64, limit int) ([]store.Event, error) {
		return c.store.Events(ctx, c.ID, after, limit)
	}
	last, open, err := Scan(ctx, read, &c.Kept, each)
	if err != nil {
		return 0, fmt.Errorf("read log of %s child %s: %w", c.name, c.ID, err)
	}
	c.turn = last
	return open, nil
}

// AppendLocked writes evs to the child log in one append, keeping what
// Kept keeps of them; call it with the lock held, or before the Child is
// shared.
func (c *Child) AppendLocked(evs ...Event) error {
	batch, entries, err := Encode(evs...)
	if err != nil {
		return err
	}
	stored, err := c.store.AppendEvents(c.LogCtx, c.ID, batch...)
	if err != nil {
		return fmt.Errorf("write log of %s child %s: %w", c.name, c.ID, err)
	}
	c.Kept.Written(stored, entries)
	return nil
}

// FollowupMessage runs msg as the next turn: on an idle agent its turn
// opens (msg logged as user/message) before this returns; during a turn
// it is queued behind it. Returns an error when the agent was closed or
// the log cannot be written.
func (c *Child) FollowupMessage(_ context.Context, msg sessionlog.UserMessage) (string, error) {
	c.Lock()
	defer c.Unlock()
	return c.FollowupLocked(msg)
}

// FollowupLocked is FollowupMessage with the lock held.
func (c *Child) FollowupLocked(msg sessionlog.UserMessage) (string, error) {
	if c.closed {
		return "", fmt.Errorf("%s child %s: agent closed", c.name, c.ID)
	}
	if c.running {
		c.queue = append(c.queue, msg)
		return msg.ID, nil
	}
	if err := c.openLocked(msg); err != nil {
		return "", err
	}
	c.DriveLocked()
	return msg.ID, nil
}

// QueuesFollowups marks the agent as one whose running turn takes no
// content: a followup then runs as the next turn (subagent.Queuer).
func (c *Child) QueuesFollowups() {}

// openLocked logs the opening of msg's turn and opens it. The lock is
// held.
func (c *Child) openLocked(msg sessionlog.UserMessage) error {
	n := c.turn + 1
	if err := c.AppendLocked(
		Event{Type: sessionlog.EventTurnStart, Data: sessionlog.TurnData{Turn: n}},
		Event{Type: sessionlog.EventUserMessage, Data: msg},
		Event{Type: sessionlog.EventStepStart, Data: sessionlog.StepData{Turn: n, Step: 1}},
	); err != nil {
		return err
	}
	c.turn = n
	c.turns.OpenTurn(n, msg)
	c.queue = slices.DeleteFunc(c.queue, func(m sessionlog.UserMessage) bool { return m.ID == msg.ID })
	return nil
}

// DriveLocked runs the open turn, and the ones queued after it, in a
// goroutine of their own. The lock is held.
func (c *Child) DriveLocked() {
	c.running, c.idle = true, make(chan struct{})
	go func() {
		for c.turns.RunTurn() {
		}
	}()
}

// ClosedLocked reports whether the agent was closed. The lock is held.
func (c *Child) ClosedLocked() bool { return c.closed }

// CanDriveLocked reports whether the agent could start a turn: it is not
// closed and no turn runs. The lock is held.
func (c *Child) CanDriveLocked() bool { return !c.closed && !c.running }

// CloseTurnLocked writes the end of the running turn n, with output, as
// o says (CloseTurn), and reports whether the log holds it. The lock is
// held.
func (c *Child) CloseTurnLocked(n int, output []model.Block, o Outcome) (ended bool) {
	o.Diagnostic = subagent.TruncateDiagnostic(o.Diagnostic)
	_, ended = CloseTurn(c.AppendLocked, c.Log, n, output, o)
	return ended
}

// NextLocked opens the next queued followup's turn, once the protocol's
// running turn is over, and reports whether it did. When that turn's end
// could not be written (ended false: the store fails, or this replica
// lost the child's lease) nothing more runs: the queued messages stay in
// the durable inbox for a later activation. The lock is held.
func (c *Child) NextLocked(ended bool) bool {
	if !ended {
		c.queue = nil
	}
	if len(c.queue) > 0 && !c.closed {
		err := c.openLocked(c.queue[0])
		if err == nil {
			return true
		}
		// The queued messages stay in the durable inbox for a later
		// activation.
		c.Log.Warn("cannot open the next turn of the "+c.name+" child", slog.Any("error", err))
		c.queue = nil
	}
	c.IdleLocked()
	return false
}

// IdleLocked ends the agent's turns: no turn runs now. The lock is held.
func (c *Child) IdleLocked() {
	c.running = false
	close(c.idle)
}

// DropLocked drops the queued followups: the manager's durable inbox
// still holds them. The lock is held.
func (c *Child) DropLocked() { c.queue = nil }

// SubmitSteer is always rejected: neither protocol has a confirmed
// mid-turn admission.
func (c *Child) SubmitSteer(context.Context, sessionlog.UserMessage) (<-chan error, error) {
	return nil, c.steerRejected()
}

// Steer is always rejected: neither protocol has a confirmed mid-turn
// admission.
func (c *Child) Steer(context.Context, []model.Block, sessionlog.Source) (string, error) {
	return "", c.steerRejected()
}

func (c *Child) steerRejected() error {
	return fmt.Errorf("%s child %s: %w: %s agents take no content mid-turn", c.name, c.ID, subagent.ErrSteerRejected, c.name)
}

// Running reports whether a turn runs or is about to.
func (c *Child) Running() bool {
	c.Lock()
	defer c.Unlock()
	return c.running
}

// Idle returns a channel closed once no turn runs; the next turn gets a
// new one.
func (c *Child) Idle() <-chan struct{} {
	c.Lock()
	defer c.Unlock()
	return c.idle
}

// Shut waits until no turn runs — the caller stopped the running one —
// and closes the agent: later followups fail. With the lock held it then
// calls then, if not nil. Returns ctx's error, for verb ("close"), when
// the turn outlasts it.
func (c *Child) Shut(ctx context.Context, verb string, then func()) error {
	select {
	case <-c.Idle():
	case <-ctx.Done():
		return fmt.Errorf("%s %s child %s: %w", verb, c.name, c.ID, ctx.Err())
	}
	c.Lock()
	defer c.Unlock()
	c.closed = true
	if then != nil {
		then()
	}
	return nil
}
