package turnlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// OneShot is a published one-shot external child as far as its protocol
// does not shape it: its log's one turn, the text the turn streamed, and
// its result, which settles exactly once, first come. A provider's run
// embeds the *OneShot that NewOneShot makes for it and stops its agent
// (OneShotParams.Stop); with the run's Dispose, OneShot's methods make a
// subagent.Run.
type OneShot struct {
	// Log carries the child's id.
	Log *slog.Logger
	// LogCtx carries the start request's values (its tenant, its trace)
	// without its cancellation: the child outlives the request.
	LogCtx context.Context

	id    string
	store Store
	name  string // the protocol's, in errors
	stop  func(Outcome)
	done  chan struct{} // closed once the result settled

	// mu guards the fields below and serialises log writes, so that nothing
	// is appended after the turn/end that settlement writes.
	mu        sync.Mutex
	logging   bool // the child session exists
	logFailed bool // a write to the child log failed: the turn fails
	settled   bool
	result    subagent.Result
	text      Output
}

// OneShotParams are what NewOneShot makes a OneShot of.
type OneShotParams struct {
	Store Store
	// ID is the child session's id, minted by the service.
	ID string
	// Name is the protocol's, for errors ("ACP").
	Name string
	// Log receives diagnostics; the OneShot's names the child.
	Log *slog.Logger
	// Stop settles the run with an outcome at once, unless it settled
	// already (Settle), and stops the agent without waiting for it. A
	// cancel, the tree's deadline and a failed log write call it.
	Stop func(Outcome)
}

// NewOneShot returns the OneShot of p's child, not settled and not yet
// logging. It keeps ctx's values, not its cancellation.
func NewOneShot(ctx context.Context, p OneShotParams) *OneShot {
	return &OneShot{
		Log: p.Log.With(slog.String("child_id", p.ID)), LogCtx: context.WithoutCancel(ctx),
		id: p.ID, store: p.Store, name: p.Name, stop: p.Stop, done: make(chan struct{}),
	}
}

// ChildID is the child session's id, minted by the service.
func (r *OneShot) ChildID() string { return r.id }

// Local is false: the child is an external agent.
func (r *OneShot) Local() bool { return false }

// Done is closed once the result has settled.
func (r *OneShot) Done() <-chan struct{} { return r.done }

// Result waits for settlement and returns the result. It never fails:
// agent failures and lost connections settle as stop reason "error"
// (R27).
func (r *OneShot) Result() (subagent.Result, error) {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result, nil
}

// Cancel settles the run "aborted" at once, unless it already settled,
// and stops the agent without waiting for it (R23, R26).
func (r *OneShot) Cancel() { r.Abort(sessionlog.CauseParent) }

// Abort is Cancel with cause.
func (r *OneShot) Abort(cause string) {
	r.stop(Outcome{Reason: subagent.StopAborted, Cause: cause})
}

// Publish runs drive, which sends the prompt and settles the run, in a
// goroutine of its own, and holds the run to the deadline d tells for its
// tree (HoldTo) until it settles. Call it once the child log exists (the
// child is published): a ctx that ended meanwhile is a post-publication
// cancel (R24), and the run settles aborted.
func (r *OneShot) Publish(ctx context.Context, d Deadlines, drive func()) {
	go drive()
	release := HoldTo(r.LogCtx, d, r.id, r.Log, r.stop)
	go func() {
		<-r.done
		release()
	}()
	if ctx.Err() != nil {
		r.Cancel()
	}
}

// Session is the header of one-shot child id of provider, which req
// starts in cwd, with req's narrowing of the tree's limits.
func Session(id, provider, cwd string, req subagent.ResolvedRequest) store.Session {
	return store.Session{
		ID:              id,
		ParentID:        req.Parent.Session.ID,
		RootID:          store.RootOf(req.Parent.Session),
		Origin:          "subagent",
		DelegationDepth: req.ChildDepth,
		Cwd:             cwd,
		Label:           req.Label,
		Provider:        provider,
		Mode:            subagent.ModeOneShot,
		CreatedAt:       time.Now(),
		Limits:          req.Limits,
	}
}

// OpenLog creates the child session sess and opens its only turn:
// turn/start, the prompt, the descriptor and step/start of turn 1, step
// 1. From then on the run logs.
func (r *OneShot) OpenLog(sess store.Session, prompt []model.Block, descriptor json.RawMessage) error {
	if err := r.store.CreateSession(r.LogCtx, sess); err != nil {
		return fmt.Errorf("create child session: %w", err)
	}
	batch, _, err := Encode(
		Event{Type: sessionlog.EventTurnStart, Data: sessionlog.TurnData{Turn: 1}},
		Event{Type: sessionlog.EventUserMessage, Data: sessionlog.UserMessage{ID: uuid.NewString(), Role: "user", Content: prompt, Source: sessionlog.Source{Kind: "user"}}},
		Event{Type: sessionlog.EventDescriptor, Data: descriptor},
		Event{Type: sessionlog.EventStepStart, Data: sessionlog.StepData{Turn: 1, Step: 1}},
	)
	if err != nil {
		return err
	}
	if _, err := r.store.AppendEvents(r.LogCtx, sess.ID, batch...); err != nil {
		return fmt.Errorf("open child log: %w", err)
	}
	r.mu.Lock()
	r.logging = true
	r.mu.Unlock()
	return nil
}

// Logging reports whether the child log exists.
func (r *OneShot) Logging() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.logging
}

// Record appends evs to the child log, and adds text to the turn's output
// once they are stored, unless the log does not exist yet, the turn is
// over or a write failed. A failed write stops the turn, which then
// fails, and is returned.
func (r *OneShot) Record(text string, evs ...Event) error {
	r.mu.Lock()
	var err error
	if r.logging && !r.settled && !r.logFailed {
		if err = r.appendLocked(evs...); err == nil {
			r.text.Add(text)
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.Log.Error("cannot write the "+r.name+" child log; stopping its turn", slog.String("event", evs[0].Type), slog.Any("error", err))
		r.stop(Outcome{Reason: subagent.StopError, Diagnostic: LogFailed})
	}
	return err
}

// appendLocked writes evs to the child log, which must exist, in one
// append; call it with mu held. A failure is remembered: the turn then
// fails.
func (r *OneShot) appendLocked(evs ...Event) error {
	batch, _, err := Encode(evs...)
	if err == nil {
		_, err = r.store.AppendEvents(r.LogCtx, r.id, batch...)
	}
	if err != nil {
		r.logFailed = true
		return fmt.Errorf("write log of %s child %s: %w", r.name, r.id, err)
	}
	return nil
}

// Output is the text the turn streamed so far, as the result keeps it.
func (r *OneShot) Output() []model.Block {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.text.Blocks()
}

// Settle records the result once, with the text streamed so far as
// output, closes the turn in the child log and then closes done, so a
// reader woken by Done finds the log complete. A turn whose log misses
// an event, or whose end cannot be written, settles "error" (CloseTurn).
func (r *OneShot) Settle(o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	if r.logFailed {
		o = Outcome{Reason: subagent.StopError, Diagnostic: LogFailed}
	}
	o.Diagnostic = subagent.TruncateDiagnostic(o.Diagnostic)
	output := r.text.Blocks()
	if r.logging {
		o, _ = CloseTurn(r.appendLocked, r.Log, 1, output, o)
	}
	r.result = subagent.Result{Output: output, StopReason: o.Reason, Diagnostic: o.Diagnostic,
		Usage: PromptUsage(r.logging, o.Usage), UsageKnown: o.Usage != nil}
	close(r.done)
}
