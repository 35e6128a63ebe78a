// Package agent is the in-process agent loop: turns, steps, streamed model
// calls, tools (live global registry, tool filter, structured_output
// capture), persona templating and the session-log writer (docs/seam.md §1).
// It knows nothing of providers.
//
// Every state change is an event appended through store.Store and mirrored
// in memory; the model history is the log's history fold
// (sessionlog.History), fed each event as it is loaded or appended, so an
// agent constructed over an existing log (cold resume, fork seed) continues
// where the log ends and a step never re-reads the log.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/schema"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// ErrClosed: the agent was closed. A steer that is not admitted fails
// matching subagent.ErrSteerRejected.
var ErrClosed = errors.New("agent closed")

// The children.Manager drives an Agent as a continuable child's agent.
var _ subagent.ChildAgent = (*Agent)(nil)

// Log is what an Agent needs of the store: its session's header, and its
// log to read and append to. A store.Store is one.
type Log interface {
	GetSession(ctx context.Context, id string) (store.Session, error)
	Events(ctx context.Context, sessionID string, after int64, limit int) ([]store.Event, error)
	LogTail(ctx context.Context, sessionID string, limit int) ([]store.Event, error)
	AppendEvents(ctx context.Context, sessionID string, evs ...store.NewEvent) ([]store.Event, error)
}

// Config configures an Agent.
type Config struct {
	// ID is the session id; the session must exist in Store.
	ID     string
	Store  Log
	Logger *slog.Logger

	// Model answers each step. Nil means no route was configured: every
	// turn then ends with reason error.
	Model     model.Model
	ModelName string
	MaxTokens int
	// ModelProvider is the provider of Model — its route's kind: echo,
	// openai — which names it in spans and token counts.
	ModelProvider string

	// Metrics counts the tokens model calls report; nil counts nothing.
	Metrics *telemetry.Metrics
	// TurnAgent, when set, makes each turn an invoke_agent span of that
	// agent name: the agent of a root session, which no run's span
	// encloses. A child's agent leaves it empty: its run's span, in the
	// ctx New is given, encloses its turns.
	TurnAgent string

	// Global is the deployment-global tool registry, read live at each
	// step; Filter scopes it (nil = no filter). Local tools are scope-local:
	// added after filtering, never filtered.
	Global *Registry
	Filter *Filter
	Local  []Tool

	// Sections are the system prompt sections besides the persona.
	Sections []Section
	// Persona is this agent's persona template; nil inherits
	// DeploymentPersona, "" means no persona. Vars are the prompt variables
	// the template may reference; a func reports false when the variable
	// has no value for the current assembly (docs/seam.md §9).
	Persona           *string
	DeploymentPersona string
	Vars              map[string]func() (string, bool)

	// OutputSchema, when set, installs the structured_output tool and its
	// prompt section (docs/seam.md §9). It must lie in the schema subset.
	OutputSchema json.RawMessage

	// BeforeFirstStep, when set, is called once, inside the agent's first
	// turn, right before its first model step; its events are appended
	// there (the one-shot descriptor hook, docs/seam.md §10).
	BeforeFirstStep func() []store.NewEvent

	// SnapshotEvery is how many events a turn's end must leave after the
	// newest history/snapshot for the agent to write a new one (see
	// snapshotLocked); 0 means 256, a negative value never.
	SnapshotEvery int

	// ChunkLinger is how long a stream delta waits for the ones after it
	// before they are appended together (see chunkWriter); 0 means 2 ms.
	ChunkLinger time.Duration

	// Created, when set, is the session as its creator just stored it
	// (CreateSessionWithEvents), Header and whole Log: New then reads
	// neither back from the store, so a new child costs no read. A creator
	// that stores the session only later, with the agent's first turn
	// (PrepareFollowup), passes the log it will store, Seqs from 0, and
	// hands the stored log to Launch.
	Created *Created

	// Gate, when set, is asked before each model step whether the turn
	// may go on (a tree's limits, internal/governance).
	Gate Gate

	// EndTurn, when set, writes the append that ends a turn (the last
	// step's unlogged events and turn/end) instead of Store.AppendEvents,
	// and returns the events as stored: its creator stores them in one
	// write with what the turn's end settles (a one-shot run's result and
	// subagent/end). An error is a failed append.
	EndTurn func(ctx context.Context, end TurnEnd) ([]store.Event, error)
}

// Gate is asked before each model step of a turn whether the turn may go
// on, and when a turn starts how long it may run.
type Gate interface {
	// Step returns the reason to end session sessionID's turn with
	// instead of its next step, nil to go on. An error lets the step run.
	Step(ctx context.Context, sessionID string) (*sessionlog.TurnReason, error)
	// Bounds returns the bounds of session sessionID's turn that starts.
	// An error leaves the turn unbounded.
	Bounds(ctx context.Context, sessionID string) (TurnBounds, error)
}

// TurnBounds bound a running turn: at Deadline (zero: none) it ends with
// reason deadline_exceeded, and once Idle (0: none) passed without an
// event appended to its log, with reason error, "idle timeout" — whatever
// the turn is doing, a model stream or a tool call.
type TurnBounds struct {
	Deadline time.Time
	Idle     time.Duration
}

// IdleTimeout is the turn/end message of a turn ended by TurnBounds.Idle.
const IdleTimeout = "idle timeout"

// TurnEnd is what EndTurn is given: the events that end the turn, the
// outcome the agent's Outcome will report once they are stored (that of no
// events before Track), and the committed structured capture, nil without
// one.
type TurnEnd struct {
	Events     []store.NewEvent
	Outcome    sessionlog.Outcome
	Structured json.RawMessage
}

// Created is a session its creator has just stored, with every event of its
// log as stored.
type Created struct {
	Header store.Session
	Log    []store.Event
}

// Agent is a live in-process agent over one session log. Its methods are
// safe for concurrent use. A goroutine drives turns while there is runnable
// work; Close stops it.
type Agent struct {
	cfg    Config
	id     string
	store  Log
	log    *slog.Logger
	global *Registry
	filter *Filter
	locals []Tool
	// base carries the values (tenant) of New's ctx without its deadline:
	// log writes must succeed even while a turn is being cancelled.
	base context.Context

	mu sync.Mutex
	// events is the log from the newest history/snapshot on, as loaded
	// (all of it when it has none, or when created), and all since.
	events []store.Event
	// history is the model-history fold of events, fed as they are
	// loaded and appended: a step reads it without going back to the log.
	history sessionlog.History
	// outcome, once Track started it, folds what the agent appends.
	outcome  *sessionlog.OutcomeFold
	turn     int                      // highest turn number in the log
	queue    []sessionlog.UserMessage // next-turn inbox: one turn per message, FIFO
	received map[string]bool          // ids in the next-turn inbox or claimed from it
	steers   []*steer                 // next-step inbox: pending confirmed steers
	parked   bool                     // queued messages wait for the next Followup
	closed   bool
	driving  bool          // the driver goroutine is running
	idle     chan struct{} // closed when driving becomes false
	cur      *turnRun      // the open turn, nil between turns
	hookDone bool
	prepared *prepared // PrepareFollowup's message and events until Launch
	entered  int       // the turn whose step 1 PrepareFollowup logged ahead
	capture  capture
	// appended is when an event was last appended to the log.
	appended time.Time
	// snap is the index in events of the newest history/snapshot, -1 when
	// none; snapSize is its size in bytes.
	snap, snapSize int
	// logged are the ids of the user/messages of events[:loggedTo], the
	// Logged of the next snapshot.
	logged   []string
	loggedTo int
	wg       sync.WaitGroup
}

// prepared is a followup PrepareFollowup returned the events of, for
// Launch to accept once its creator stored them.
type prepared struct {
	msg sessionlog.UserMessage
	evs []sessionlog.Entry
}

// turnRun is an open turn.
type turnRun struct {
	n      int
	ctx    context.Context
	cancel context.CancelFunc
	cause  string // set by the first Cancel
	// stop, set by the turn's bounds (see bound), is the reason the turn
	// ends with once its cancellation is seen.
	stop *sessionlog.TurnReason
	// inv is the turn's invoke_agent span (Config.TurnAgent), else nil.
	inv *telemetry.Invocation
}

// New returns the agent of session cfg.ID, loading its existing log: turn
// numbering, the inbox and a committed structured capture continue from it.
// A turn left open by a crash is closed with reason interrupted, and steers
// left pending are cancelled; messages left queued stay parked until the
// next Followup. New returns an error if the session does not exist
// (wrapping store.ErrNotFound), if the tool filter is empty or names an
// unknown global tool (matching ErrToolFilter), or if OutputSchema leaves
// the supported subset. Nothing is written on error.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.ID == "" || cfg.Store == nil {
		return nil, errors.New("new agent: ID and Store are required")
	}
	if cfg.Filter != nil {
		if err := cfg.Filter.Check(cfg.Global); err != nil {
			return nil, err
		}
	}
	if cfg.OutputSchema != nil {
		if v := schema.Check(cfg.OutputSchema); len(v) > 0 {
			return nil, fmt.Errorf("new agent %s: unsupported JSON schema: %s", cfg.ID, strings.Join(v, "; "))
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Agent{
		cfg:      cfg,
		id:       cfg.ID,
		store:    cfg.Store,
		log:      logger.With(slog.String("session_id", cfg.ID)),
		global:   cfg.Global,
		locals:   slices.Clone(cfg.Local),
		base:     context.WithoutCancel(ctx),
		idle:     make(chan struct{}),
		received: map[string]bool{},
		snap:     -1,
	}
	close(a.idle)
	if f := cfg.Filter; f != nil {
		// A private copy: the filter is read live at every step.
		a.filter = &Filter{Allow: slices.Clone(f.Allow), Deny: slices.Clone(f.Deny)}
	}
	if cfg.OutputSchema != nil {
		a.locals = slices.DeleteFunc(a.locals, func(t Tool) bool { return t.Name == StructuredOutputTool })
		a.locals = append(a.locals, a.structuredTool())
	}
	if c := cfg.Created; c != nil {
		a.events = slices.Clone(c.Log)
		if err := a.replay(c.Header.SeedLength); err != nil {
			return nil, fmt.Errorf("new agent %s: %w", cfg.ID, err)
		}
		return a, nil
	}
	sess, err := cfg.Store.GetSession(ctx, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("new agent %s: %w", cfg.ID, err)
	}
	if err := a.load(ctx, sess.SeedLength); err != nil {
		return nil, fmt.Errorf("new agent %s: %w", cfg.ID, err)
	}
	return a, nil
}

// ID returns the session id.
func (a *Agent) ID() string { return a.id }

// Note appends a tool's own event to the log of the turn it runs in — a
// delegation's approval, say — numbered as that turn: data builds the
// payload from the turn's number. It fails when no turn runs or the log
// cannot be written.
func (a *Agent) Note(typ string, data func(turn int) any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == nil {
		return fmt.Errorf("agent %s: note %s: no turn runs", a.id, typ)
	}
	e, err := sessionlog.Encode(typ, data(a.cur.n))
	if err != nil {
		return fmt.Errorf("agent %s: note %s: %w", a.id, typ, err)
	}
	return a.appendLocked(e)
}

// Events returns a copy of the session log as this agent has written and
// loaded it.
func (a *Agent) Events() []store.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

// EventsFrom returns a copy of the events of Events from index i on (none
// when i is past the end), so a caller can follow the log incrementally.
func (a *Agent) EventsFrom(i int) []store.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i >= len(a.events) {
		return nil
	}
	return slices.Clone(a.events[max(i, 0):])
}

// Track starts the outcome fold of the events the agent appends from now
// on, replacing one started earlier: the facts of a run or an activation
// are those of its own events. Outcome reads the fold, so settlement never
// goes back to the log.
func (a *Agent) Track() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outcome = &sessionlog.OutcomeFold{}
}

// Outcome returns the outcome of the events appended since Track; before
// Track, that of no events.
func (a *Agent) Outcome() sessionlog.Outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outcome.Outcome()
}

// Running reports whether a turn is running or about to run.
func (a *Agent) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.driving
}

// Idle returns a channel closed once no turn runs and nothing runnable is
// queued; the next turn gets a new one.
func (a *Agent) Idle() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.idle
}

// WaitIdle returns nil once no turn runs and nothing runnable is queued
// (parked messages are not runnable), or ctx.Err() if ctx ends first.
func (a *Agent) WaitIdle(ctx context.Context) error {
	select {
	case <-a.Idle():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close cancels the running turn with cause disposed, discards the inbox,
// rejects later Followups and Steers, and waits until the driver goroutine
// has exited. It is idempotent; it returns ctx.Err() if ctx ends first.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.Cancel(sessionlog.CauseDisposed, false)
	if err := a.WaitIdle(ctx); err != nil {
		return fmt.Errorf("close agent %s: %w", a.id, err)
	}
	a.wg.Wait()
	return nil
}

// appendLocked appends evs to the store and the mirror; no events is no
// store call. a.mu must be held, so that the log order matches the order
// of in-memory state changes.
func (a *Agent) appendLocked(evs ...sessionlog.Entry) error {
	if len(evs) == 0 {
		return nil
	}
	stored, err := a.store.AppendEvents(a.base, a.id, newEvents(evs)...)
	if err != nil {
		return fmt.Errorf("agent %s: append %s: %w", a.id, evs[0].Type, err)
	}
	a.recordLocked(stored, evs)
	return nil
}

// endTurnLocked is appendLocked for the events that end a turn, through
// Config.EndTurn when it is set. a.mu must be held.
func (a *Agent) endTurnLocked(evs ...sessionlog.Entry) error {
	if a.cfg.EndTurn == nil {
		return a.appendLocked(evs...)
	}
	end := TurnEnd{Events: newEvents(evs), Outcome: a.outcomeAfterLocked(evs)}
	if a.capture.committed {
		end.Structured = append(json.RawMessage(nil), a.capture.value...)
	}
	stored, err := a.cfg.EndTurn(a.base, end)
	if err != nil {
		return fmt.Errorf("agent %s: end turn: %w", a.id, err)
	}
	a.recordLocked(stored, evs)
	return nil
}

// recordLocked takes stored, evs as the store stored them, into the mirror
// and feeds them to the history and outcome folds with the payloads of
// evs, so nothing is decoded again. a.mu must be held.
func (a *Agent) recordLocked(stored []store.Event, evs []sessionlog.Entry) {
	a.events = append(a.events, stored...)
	a.appended = time.Now()
	for i, e := range stored {
		var payload any // decoded by the folds when evs lacks it
		if i < len(evs) {
			payload = evs[i].Payload
		}
		a.history.Fold(e, payload)
		if a.outcome != nil {
			a.outcome.Fold(e, payload)
		}
	}
}

// outcomeAfterLocked is the outcome Outcome reports once evs are stored,
// folded on a copy so that a failed write leaves the fold as it was. The
// events' Seqs are those they will get. a.mu must be held.
func (a *Agent) outcomeAfterLocked(evs []sessionlog.Entry) sessionlog.Outcome {
	if a.outcome == nil {
		return a.outcome.Outcome()
	}
	f := a.outcome.Clone()
	next := int64(0)
	if n := len(a.events); n > 0 {
		next = a.events[n-1].Seq + 1
	}
	for i, e := range evs {
		f.Fold(store.Event{Seq: next + int64(i), Type: e.Type, Time: e.Time, Data: e.Data}, e.Payload)
	}
	return f.Outcome()
}

// newEvents returns the store events of evs.
func newEvents(evs []sessionlog.Entry) []store.NewEvent {
	batch := make([]store.NewEvent, len(evs))
	for i, e := range evs {
		batch[i] = e.NewEvent
	}
	return batch
}

// append is appendLocked for callers not holding a.mu.
func (a *Agent) append(evs ...sessionlog.Entry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.appendLocked(evs...)
}

// event builds the entry of a sessionlog payload, which always marshals.
func event(typ string, data any) sessionlog.Entry {
	e, err := sessionlog.Encode(typ, data)
	if err != nil {
		panic(fmt.Sprintf("agent: %v", err))
	}
	return e
}

// replay restores the agent's state from the log in a.events: turn
// numbering, the inbox (from seedLength), a committed capture, and repairs
// a crashed turn. A history/snapshot stands for the events before it.
func (a *Agent) replay(seedLength int) error {
	a.history.Add(a.events...)
	openTurn := 0 // a turn without turn/end
	var openStep *sessionlog.StepData
	var steerQueue []sessionlog.UserMessage
	calls := map[string]string{} // structured_output call id → arguments
	for i, ev := range a.events {
		switch ev.Type {
		case sessionlog.EventTurnStart:
			var d sessionlog.TurnData
			if json.Unmarshal(ev.Data, &d) == nil {
				a.turn = max(a.turn, d.Turn)
				openTurn = d.Turn
			}
		case sessionlog.EventTurnEnd:
			openTurn, openStep = 0, nil
		case sessionlog.EventStepStart:
			var d sessionlog.StepData
			if json.Unmarshal(ev.Data, &d) == nil {
				openStep = &d
			}
		case sessionlog.EventStepEnd:
			openStep = nil
		case sessionlog.EventInboxSpliced:
			var d sessionlog.InboxSplicedData
			if ev.Seq < int64(seedLength) || json.Unmarshal(ev.Data, &d) != nil {
				continue
			}
			if d.Target == sessionlog.TargetNextStep {
				steerQueue = splice(steerQueue, d)
				continue
			}
			if d.Outcome == sessionlog.OutcomeCanceled {
				for _, m := range spliced(a.queue, d) {
					delete(a.received, m.ID)
				}
			}
			a.queue = splice(a.queue, d)
			for _, m := range d.Inserted {
				a.received[m.ID] = true
			}
		case sessionlog.EventSnapshot:
			d, err := sessionlog.DecodeSnapshot(ev)
			if err != nil {
				continue
			}
			// Written at a turn's end, with no steer pending.
			a.snap, a.snapSize = i, len(ev.Data)
			a.turn, openTurn, openStep, steerQueue = max(a.turn, d.Turn), 0, nil, nil
			if ev.Seq < int64(seedLength) {
				continue // a fork parent's: its inbox and capture are not this agent's
			}
			a.queue = slices.Clone(d.Queue)
			a.received = map[string]bool{}
			for _, m := range d.Queue {
				a.received[m.ID] = true
			}
			for _, id := range d.Logged {
				a.received[id] = true
			}
			if d.Structured != nil && a.cfg.OutputSchema != nil {
				a.capture = capture{staged: true, committed: true, value: d.Structured}
			}
		case sessionlog.EventToolCall:
			var d sessionlog.ToolCallData
			if json.Unmarshal(ev.Data, &d) == nil && d.Name == StructuredOutputTool {
				calls[d.CallID] = d.Arguments
			}
		case sessionlog.EventToolResult:
			var d sessionlog.ToolResultData
			// Only the agent's own suffix counts: a fork seed may hold the
			// parent's capture, which is not this agent's answer.
			if ev.Seq >= int64(seedLength) && json.Unmarshal(ev.Data, &d) == nil && d.Name == StructuredOutputTool && !d.IsError && a.cfg.OutputSchema != nil {
				if args, ok := calls[d.CallID]; ok {
					a.capture = capture{staged: true, committed: true, value: json.RawMessage(args)}
				}
			}
		}
	}
	a.parked = len(a.queue) > 0
	a.loggedTo = a.snap + 1
	var repair []sessionlog.Entry
	if openStep != nil {
		repair = append(repair, event(sessionlog.EventStepEnd, *openStep))
	}
	if openTurn != 0 {
		repair = append(repair, event(sessionlog.EventTurnEnd, sessionlog.TurnEndData{Turn: openTurn, Reason: sessionlog.TurnReason{Kind: sessionlog.ReasonInterrupted}}))
	}
	if len(steerQueue) > 0 {
		repair = append(repair, cancelSplice(sessionlog.TargetNextStep, 0, len(steerQueue)))
	}
	if len(repair) == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.appendLocked(repair...)
}

// splice applies one inbox splice to q.
func splice(q []sessionlog.UserMessage, d sessionlog.InboxSplicedData) []sessionlog.UserMessage {
	start, end := spliceRange(q, d)
	return slices.Concat(q[:start], d.Inserted, q[end:])
}

// spliced returns the messages of q that splice d removes.
func spliced(q []sessionlog.UserMessage, d sessionlog.InboxSplicedData) []sessionlog.UserMessage {
	start, end := spliceRange(q, d)
	return q[start:end]
}

// spliceRange is the range of q that splice d removes, clamped to q.
func spliceRange(q []sessionlog.UserMessage, d sessionlog.InboxSplicedData) (start, end int) {
	start = min(max(d.Start, 0), len(q))
	return start, min(start+d.RemovedCount, len(q))
}

// cancelSplice discards n messages of target from start on.
func cancelSplice(target string, start, n int) sessionlog.Entry {
	return event(sessionlog.EventInboxSpliced, sessionlog.InboxSplicedData{Target: target, Start: start, RemovedCount: n,
		Inserted: []sessionlog.UserMessage{}, Outcome: sessionlog.OutcomeCanceled})
}
