// Package store defines what subagentd persists — session headers, their
// append-only logs, runs and activations, the global lifecycle log and the
// durable inbox — as one Store interface, implemented by internal/pg
// (durable) and internal/memstore (default, tests). The conformance suite in
// storetest holds both to the same contract.
//
// Every call is scoped to the tenant carried by its context (WithTenant;
// "default" when absent): rows of another tenant are invisible, reported as
// ErrNotFound, never as a permission error.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Errors every implementation returns (wrapped) so callers can use errors.Is.
var (
	// ErrNotFound: no such row for this tenant.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row already exists, or a once-only transition (ending
	// a run) already happened.
	ErrConflict = errors.New("conflict")
)

// DefaultTenant is the tenant of a context that carries none.
const DefaultTenant = "default"

type tenantKey struct{}

// WithTenant returns ctx scoped to tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// Tenant returns the tenant ctx is scoped to.
func Tenant(ctx context.Context) string {
	if t, ok := ctx.Value(tenantKey{}).(string); ok && t != "" {
		return t
	}
	return DefaultTenant
}

// Session is a session header (docs/seam.md §1). Root sessions are created by
// clients and carry their own agent route; children are created by providers.
type Session struct {
	ID       string
	ParentID string // "" for a root session
	// RootID is the root session of the session's tree, its own ID for a
	// root. The store fills it in when a session is created without one:
	// the parent's RootID (its ParentID when the parent is not stored).
	RootID string
	// Origin is "subagent" for children and "" for roots.
	Origin          string
	DelegationDepth int
	// SeedLength is the number of leading events inherited from a fork parent.
	SeedLength int
	Cwd        string
	Label      string
	// Provider is the subagent provider that created a child; "" for roots.
	Provider string
	// Mode is "one-shot" or "continuable" for children, "" for roots. It is
	// derived data: the subagent/descriptor event in the log is the authority.
	Mode          string
	AgentProvider string
	AgentModel    string
	MaxTokens     int
	Persona       *string
	// Limits are the limits the session was created with: a root's own,
	// a child's narrowing of its tree's (TreeLimits). A root's may change
	// later: read its current ones with SessionLimits.
	Limits    Limits
	CreatedAt time.Time
	// WakeParent says whether a continuable child's settlement notices open
	// its parent's turn, or are recorded quietly for the parent's next turn
	// (children.ContinuableRequest.WakeParent). False for roots.
	WakeParent bool
}

// RootOf is the root of s's tree: its RootID, else (a header built before
// the store filled it in) itself for a root and its parent for a child.
func RootOf(s Session) string {
	switch {
	case s.RootID != "":
		return s.RootID
	case s.ParentID == "":
		return s.ID
	}
	return s.ParentID
}

// Usage counts model calls and the tokens they reported (docs/seam.md §1 has
// the log events that record them).
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	ModelCalls   int64
	// Reported is how many of ModelCalls reported their usage: the tokens
	// are complete only when it equals ModelCalls.
	Reported int64
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens,
		ModelCalls: u.ModelCalls + v.ModelCalls, Reported: u.Reported + v.Reported}
}

// Known reports whether every model call counted reported its usage.
func (u Usage) Known() bool { return u.Reported >= u.ModelCalls }

// SessionFilter selects sessions for ListSessions, oldest first.
type SessionFilter struct {
	// ParentID, when non-nil, keeps only direct children of that session
	// ("" keeps only roots).
	ParentID *string
	// AfterID continues a listing after the session with this id.
	AfterID string
	Limit   int
}

// NewEvent is an event to append; the store assigns Seq, and Time when zero.
type NewEvent struct {
	Type string
	Time time.Time
	Data json.RawMessage
	// Marshaled says Data is the output of json.Marshal in this process,
	// so it is valid JSON: CheckEvents does not parse it again (its size
	// and CheckJSONText still apply). Never set it for data that came
	// from outside.
	Marshaled bool
	// Usage is the model usage the event records (sessionlog.Encode sets
	// it: a step's start counts a model call, its assistant/message the
	// tokens the call reported), which AppendEvents and EndRunWithEvents
	// add to the session's running sum (SessionUsage.Log) in the same
	// commit. Zero for other events.
	Usage Usage
}

// Event is one entry of a session log. Seq is 0-based and contiguous.
type Event struct {
	Seq  int64
	Type string
	Time time.Time
	Data json.RawMessage
}

// Run kinds.
const (
	KindOneShot    = "one-shot"
	KindActivation = "activation"
)

// Run states.
const (
	StateRunning  = "running"
	StateSettled  = "settled"
	StateDisposed = "disposed"
)

// Run is one one-shot run or one activation of a continuable child (kind
// activation, with TaskID). Owner and LeaseUntil record which replica drives
// it (docs/architecture.md §5).
type Run struct {
	ID string
	// Tenant is filled in by the store when reading; it is ignored on write
	// (the context's tenant is used). Readers across tenants (ExpiredRuns)
	// need it to scope the follow-up writes.
	Tenant   string
	Kind     string
	Provider string
	ChildID  string
	ParentID string
	// RootID is the root session of the tree the run belongs to (the
	// parent's Session.RootID), carried by its lifecycle events.
	RootID     string
	TaskID     string
	Local      bool
	State      string
	StartedAt  time.Time
	EndedAt    time.Time // zero while running
	StopReason string
	Output     json.RawMessage // JSON array of content blocks; nil while running
	Structured json.RawMessage
	Diagnostic string
	Owner      string
	LeaseUntil time.Time
	// Traceparent is the W3C traceparent of the span that asked for the
	// run (a parent's tool call), "" when it was not traced: the run's
	// span is its child wherever and whenever the run starts or resumes.
	Traceparent string
	// Usage is the model usage of the run's own work, recorded when it
	// settles (RunResult.Usage); zero while it runs. UsageKnown is false
	// when its provider reported none (or the run was closed unsettled).
	Usage      Usage
	UsageKnown bool
	// PendingApprovals counts the run's approvals still pending. Stores
	// fill it in when reading (GetRun, ListRuns); it is ignored on write.
	PendingApprovals int
}

// RunResult is how a run settled.
type RunResult struct {
	StopReason string
	Output     json.RawMessage
	Structured json.RawMessage
	Diagnostic string
	EndedAt    time.Time
	// Usage is the model usage of the run's own work, UsageKnown whether
	// its provider reported it (false for a run closed without a result).
	Usage      Usage
	UsageKnown bool
}

// SessionUsage is one session's usage as SessionUsage sums it.
type SessionUsage struct {
	SessionID string
	ParentID  string
	// Log is the running sum of the model usage the session's log records
	// (NewEvent.Usage of the events appended after its creation: a fork's
	// seed is the parent's), kept by the store in the commit of each
	// append, so it is read without folding the log.
	Log Usage
	// Runs sums Run.Usage over the session's settled runs; Unknown counts
	// those of them whose UsageKnown is false.
	Runs     Usage
	Unknown  int64
	RunCount int64
	LiveRuns int64
}

// RunFilter selects runs for ListRuns, oldest first.
type RunFilter struct {
	ParentID string
	ChildID  string
	// ChildIDs, when non-empty, keeps only runs of these children (one
	// query for a page of sessions).
	ChildIDs []string
	TaskID   string
	State    string
	AfterID  string
	Limit    int
}

// LifecycleEvent is one entry of the global lifecycle log that /v1/events
// replays. ID is assigned by the store in commit order: a reader that sees ID
// n has already been able to see every ID below n.
type LifecycleEvent struct {
	ID       int64
	Type     string
	ParentID string
	// RootID is the root session of the tree the event belongs to, ""
	// for unscoped events (a provider's).
	RootID  string
	RunID   string
	Time    time.Time
	Payload json.RawMessage
}

// LifecycleFilter selects lifecycle events with ID > After, oldest first.
type LifecycleFilter struct {
	After    int64
	Limit    int
	ParentID string
	// RootID, when set, keeps only the events of that tree.
	RootID string
	Types  []string
}

// InboxMessage is a message accepted for a resident agent (a root session
// or a continuable child) and not yet delivered into its log.
type InboxMessage struct {
	ID      string
	ChildID string
	TaskID  string
	Content json.RawMessage
	Source  json.RawMessage
	// Quiet marks a message delivered without waking its recipient (a
	// quiet report, a notice during shutdown): it joins the recipient's
	// next turn and never starts one itself, also after a crash.
	Quiet     bool
	CreatedAt time.Time
}

// PendingChild names a child with undelivered inbox messages.
type PendingChild struct {
	Tenant  string
	ChildID string
}

// Idempotency is the record of a request sent with an Idempotency-Key
// (docs/architecture.md §8), scoped to the tenant like every row.
type Idempotency struct {
	Key string
	// RequestHash identifies the request (method, path, body): a retry with
	// another hash reuses the key for a different request.
	RequestHash string
	// Status is 0 while the first request is in flight, else the status of
	// its answer, and Response what the caller stored to replay it.
	Status    int
	Response  json.RawMessage
	CreatedAt time.Time
}

// Store is the persistence contract. Implementations are safe for concurrent
// use. Limits <= 0 mean a store-chosen default of 100; no call returns more
// than 1000 rows.
// StartRunParams is a child session and its run started in one commit
// (Store.StartRunWithSession).
type StartRunParams struct {
	// Session is the child's header; Events the start of its log.
	Session Session
	Events  []NewEvent
	// Run is the run row (State running); Start its subagent/start.
	Run   Run
	Start LifecycleEvent
}

// EndRunParams is a run's settlement with its child's last events
// (Store.EndRunWithEvents).
type EndRunParams struct {
	RunID  string
	Result RunResult
	// End is the run's subagent/end.
	End LifecycleEvent
	// Events are appended to the child's log in the same commit.
	Events []NewEvent
}

type Store interface {
	Signins
	Residents
	Webhooks
	Disposals
	Approvals
	TreeLimits

	// CreateSession stores a new header. Returns ErrConflict if the id exists
	// in any tenant: ids are global.
	CreateSession(ctx context.Context, s Session) error
	// CreateSessionWithEvents stores a new header and evs as the start of
	// its log (seqs from 0) in one transaction, and returns the events as
	// stored: a new child's setup is one commit, and its creator holds the
	// whole log without reading it back. Returns ErrConflict as
	// CreateSession, ErrInvalid (see CheckEvents) for a bad event; either
	// way nothing is stored.
	CreateSessionWithEvents(ctx context.Context, s Session, evs ...NewEvent) ([]Event, error)
	// GetSession returns one header. Returns ErrNotFound.
	GetSession(ctx context.Context, id string) (Session, error)
	// ListSessions returns headers ordered by (CreatedAt, ID). Returns
	// ErrNotFound for an unknown AfterID.
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)
	// SearchSessions returns the sessions whose log has an event (other
	// than SearchSkips) whose SearchText matches f.Query, ignoring case,
	// each with its first such event, ordered by (CreatedAt, ID). Returns
	// ErrNotFound for an unknown AfterID.
	SearchSessions(ctx context.Context, f SearchFilter) ([]SessionHit, error)

	// AppendEvents appends evs to the session's log atomically, giving them
	// the next contiguous seqs, and returns them as stored. Returns
	// ErrNotFound if the session does not exist, ErrInvalid (see
	// CheckEvents) for a bad event; either way nothing is appended.
	AppendEvents(ctx context.Context, sessionID string, evs ...NewEvent) ([]Event, error)
	// Events returns up to limit events with Seq > after, in seq order; pass
	// after = -1 to read from the start. Returns ErrNotFound for an unknown
	// session.
	Events(ctx context.Context, sessionID string, after int64, limit int) ([]Event, error)
	// EventsBefore returns the last limit events with Seq < before, in seq
	// order: a reader that starts from the end of a long log reads it
	// backwards in pages, passing the first seq of each page as the next
	// before. Returns ErrNotFound for an unknown session.
	EventsBefore(ctx context.Context, sessionID string, before int64, limit int) ([]Event, error)
	// LogTail returns up to limit events of the session's log from its
	// newest SnapshotEvent on, that event first, in seq order — from the
	// start when the log has none — without reading what precedes it: a
	// reader that folds the log (a cold resume) starts from the snapshot.
	// Page on with Events after the last seq. Returns ErrNotFound for an
	// unknown session.
	LogTail(ctx context.Context, sessionID string, limit int) ([]Event, error)

	// StartRun stores r (State running) and appends start to the lifecycle
	// log in one transaction, returning start with its ID. Settlement fields
	// of r are ignored. Returns ErrConflict if the run id exists (any tenant).
	StartRun(ctx context.Context, r Run, start LifecycleEvent) (LifecycleEvent, error)
	// EndRun settles the run with res and appends end in one transaction.
	// Returns ErrNotFound, or ErrConflict if the run already ended: this is
	// what makes subagent/end exactly-once, also across restarts.
	EndRun(ctx context.Context, runID string, res RunResult, end LifecycleEvent) (LifecycleEvent, error)
	// StartRunWithSession is CreateSessionWithEvents and StartRun in one
	// transaction: it stores the child session p.Session with p.Events as
	// the start of its log, p.Run (State running) and p.Start, and returns
	// the events and start as stored. A one-shot run and everything its start promises
	// (the child, its prompt, the run row, subagent/start) are one commit,
	// durable together or not at all. Returns ErrConflict if the session
	// or run id exists (any tenant), ErrInvalid for a bad event or
	// payload; either way nothing is stored.
	StartRunWithSession(ctx context.Context, p StartRunParams) ([]Event, LifecycleEvent, error)
	// EndRunWithEvents is AppendEvents and EndRun in one transaction: it
	// appends p.Events to the log of run p.RunID's child session
	// (Run.ChildID), settles the run with p.Result and appends p.End,
	// returning the end and the events as stored, so that a child's last events and its run's
	// settlement are one commit. Returns ErrNotFound for an unknown run or
	// a child without a session, ErrConflict if the run already ended,
	// ErrInvalid for a bad event or payload; on any error nothing is
	// stored.
	EndRunWithEvents(ctx context.Context, p EndRunParams) (LifecycleEvent, []Event, error)
	// DisposeRun marks a settled run disposed. Idempotent. Returns
	// ErrNotFound, or ErrConflict if the run is still running.
	DisposeRun(ctx context.Context, runID string) error
	// GetRun returns one run. Returns ErrNotFound.
	GetRun(ctx context.Context, runID string) (Run, error)
	// ListRuns returns runs ordered by (StartedAt, ID). Returns ErrNotFound
	// for an unknown AfterID.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)
	// RenewLeases extends LeaseUntil of every running run and every
	// resident lease (ClaimResident) owned by owner, in every tenant: one
	// replica's heartbeat covers everything it drives.
	RenewLeases(ctx context.Context, owner string, until time.Time) error
	// ExpiredRuns returns running runs, of any tenant, whose lease ended
	// before now: their owner is gone.
	ExpiredRuns(ctx context.Context, now time.Time) ([]Run, error)
	// SessionUsage returns the usage of session id and, with tree, of
	// every session below it (by ParentID, to any depth), the session
	// first, then the others ordered by (CreatedAt, ID): each one's log
	// sum and the sums over the runs rows whose ChildID it
	// is, from stored sums, without reading a log. Runs count as live when
	// running with a lease that ends after now. Returns ErrNotFound for an
	// unknown session.
	SessionUsage(ctx context.Context, id string, tree bool, now time.Time) ([]SessionUsage, error)

	// AppendLifecycle appends e (provider-added/-removed and other unscoped
	// events) and returns it with its ID.
	AppendLifecycle(ctx context.Context, e LifecycleEvent) (LifecycleEvent, error)
	// Lifecycle returns events matching f.
	Lifecycle(ctx context.Context, f LifecycleFilter) ([]LifecycleEvent, error)
	// LastLifecycleID returns the ID of the tenant's newest lifecycle event,
	// 0 when it has none. Since IDs are visible in commit order, every event
	// up to it can be read: a live reader starts there without scanning.
	LastLifecycleID(ctx context.Context) (int64, error)

	// Enqueue stores an accepted followup. Returns ErrConflict if the id
	// exists.
	Enqueue(ctx context.Context, m InboxMessage) error
	// Pending returns the child's undelivered messages in acceptance order.
	Pending(ctx context.Context, childID string) ([]InboxMessage, error)
	// Ack removes delivered messages. Unknown ids are ignored.
	Ack(ctx context.Context, childID string, ids ...string) error
	// PendingChildren lists, across tenants, the children that have
	// undelivered messages, ordered by their oldest message, at most 1000:
	// what start-up recovery must resume.
	PendingChildren(ctx context.Context) ([]PendingChild, error)

	// ReserveIdempotency records key, in flight, for the request hash and
	// returns it with reserved true — unless the tenant has the key
	// already: then it returns the existing record, reserved false. A
	// reservation still in flight that was created before staleBefore (its
	// process died) is replaced as if it were absent.
	ReserveIdempotency(ctx context.Context, key, hash string, staleBefore time.Time) (rec Idempotency, reserved bool, err error)
	// CompleteIdempotency stores the answer to the request holding key's
	// reservation. Returns ErrNotFound if the key is not reserved (swept),
	// ErrConflict if it already has an answer.
	CompleteIdempotency(ctx context.Context, key string, status int, response json.RawMessage) error
	// ReleaseIdempotency drops key's reservation if it is still in flight,
	// so that a retry runs the request again; an answered key is kept.
	ReleaseIdempotency(ctx context.Context, key string) error
	// SweepIdempotency deletes the keys of every tenant created before
	// before and returns how many it deleted.
	SweepIdempotency(ctx context.Context, before time.Time) (int64, error)

	// Subscribe returns a channel that receives a value (coalesced, never
	// blocking the writer) after a commit touches topic, and a func that
	// ends the subscription. Wake-ups carry no data: read the tables. After a
	// lost connection the store wakes every subscriber so readers re-query.
	Subscribe(topic string) (<-chan struct{}, func())

	// Ping reports whether the store can serve requests (reachable, schema
	// current).
	Ping(ctx context.Context) error
}

// TurnStartEvent and TurnEndEvent are the types of the session-log events
// that open and close a turn (internal/sessionlog), which Driving reads.
const (
	TurnStartEvent = "turn/start"
	TurnEndEvent   = "turn/end"
)

// SnapshotEvent is the type of the session-log event that folds the
// history before it (written by the agent, internal/agent). Stores index it
// for LogTail; to every other reader it is an ordinary event.
const SnapshotEvent = "history/snapshot"

// LifecycleTopic is the wake-up topic of the lifecycle log.
const LifecycleTopic = "lifecycle"

// SessionTopic is the wake-up topic of one session's log.
func SessionTopic(sessionID string) string { return "session:" + sessionID }

// SessionLister is the part of a Store that lists sessions.
type SessionLister interface {
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)
}

// childrenPage is how many headers Children reads at a time.
const childrenPage = 1000

// Children returns every session whose parent is parentID, oldest
// first, reading st's pages to the end.
func Children(ctx context.Context, st SessionLister, parentID string) ([]Session, error) {
	var out []Session
	for after := ""; ; {
		page, err := st.ListSessions(ctx, SessionFilter{ParentID: &parentID, AfterID: after, Limit: childrenPage})
		if err != nil {
			return nil, fmt.Errorf("list children of %s: %w", parentID, err)
		}
		out = append(out, page...)
		if len(page) < childrenPage {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}
