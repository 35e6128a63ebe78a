// Package governance holds the rules that let people govern agent trees.
// Today that is human-in-the-loop approvals: an agent that asks permission
// for a tool call waits on a pending approval until a person decides it
// (any replica may take the decision), its turn ends, or its timeout
// passes. The package is domain only: it reads and writes through the
// store's interfaces and knows nothing of HTTP or of the agents' protocol.
//
// Every close of an approval is one conditional store write that also
// appends approval/decided to the lifecycle log, so the first decision wins
// and every replica learns of it: the waiting side watches the lifecycle
// wake-ups (store.LifecycleTopic, NOTIFY across replicas) and re-reads the
// approval, with a periodic re-read as the safety net for a lost wake-up.
package governance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Lifecycle event types of approvals.
const (
	EventApprovalRequested = "approval/requested"
	EventApprovalDecided   = "approval/decided"
)

// Decision authors beside a tenant's name.
const (
	ByTimeout   = "timeout"
	ByOwnerLost = "owner lost"
)

// ACP permission option kinds.
const (
	KindAllowOnce    = "allow_once"
	KindAllowAlways  = "allow_always"
	KindRejectOnce   = "reject_once"
	KindRejectAlways = "reject_always"
)

// ApprovalStore is the part of store.Store approvals use.
type ApprovalStore interface {
	store.Approvals
	GetSession(ctx context.Context, id string) (store.Session, error)
	GetRun(ctx context.Context, runID string) (store.Run, error)
	ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error)
	Driving(ctx context.Context, sessionIDs []string, now time.Time) (map[string]bool, error)
	Subscribe(topic string) (<-chan struct{}, func())
}

// ApprovalsConfig configures Approvals.
type ApprovalsConfig struct {
	Store ApprovalStore
	// Owner names this replica (the runs' owner): the approvals its agents
	// wait on carry it.
	Owner  string
	Logger *slog.Logger
	// Poll is how often a waiting agent re-reads its approval even without
	// a wake-up (default DefaultPoll).
	Poll time.Duration
}

// DefaultPoll is the safety-net re-read interval of a waiting approval.
const DefaultPoll = 2 * time.Second

// Approvals creates, decides and waits on approvals. Safe for concurrent
// use.
type Approvals struct {
	st    ApprovalStore
	owner string
	log   *slog.Logger
	poll  time.Duration
}

// NewApprovals returns the approvals of cfg.
func NewApprovals(cfg ApprovalsConfig) *Approvals {
	poll := cfg.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Approvals{st: cfg.Store, owner: cfg.Owner, log: log, poll: poll}
}

// Ask is a permission request that policy sends to a person.
type Ask struct {
	// SessionID is the asking child's session.
	SessionID string
	Provider  string
	ToolCall  store.ApprovalToolCall
	Options   []store.ApprovalOption
	// Timeout, when positive, is how long the approval waits for a person.
	Timeout time.Duration
}

// maxTreeDepth bounds the walk from a session to its root.
const maxTreeDepth = 256

// Open creates the pending approval of ask and announces it
// (approval/requested, in the same commit). The approval belongs to the
// child's running run or activation: when the agent asks before the run
// that starts it is recorded (its first prompt races the start's commit),
// Open waits for that commit. A root session's approval (its agent's
// delegation) belongs to its turn and has no run. Returns an EAborted *subagent.Error when ctx
// ends first, and store errors.
func (a *Approvals) Open(ctx context.Context, ask Ask) (store.Approval, error) {
	sess, err := a.st.GetSession(ctx, ask.SessionID)
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval: read session %s: %w", ask.SessionID, err)
	}
	root, err := a.root(ctx, sess)
	if err != nil {
		return store.Approval{}, err
	}
	// A root session's agent asks in its own turn, which has no run.
	var run store.Run
	if sess.ParentID != "" {
		if run, err = a.runOf(ctx, ask.SessionID); err != nil {
			return store.Approval{}, err
		}
	}
	now := time.Now()
	ap := store.Approval{
		ID: uuid.NewString(), State: store.ApprovalPending, SessionID: ask.SessionID, ParentID: sess.ParentID,
		RootSessionID: root, RunID: run.ID, TaskID: run.TaskID, Provider: ask.Provider, Owner: a.owner,
		ToolCall: ask.ToolCall, Options: ask.Options, CreatedAt: now,
	}
	if ask.Timeout > 0 {
		ap.ExpiresAt = now.Add(ask.Timeout)
	}
	ev, err := event(EventApprovalRequested, ap)
	if err != nil {
		return store.Approval{}, err
	}
	ap, _, err = a.st.CreateApproval(ctx, ap, ev)
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval: create: %w", err)
	}
	return ap, nil
}

// root returns the id of sess's root session.
func (a *Approvals) root(ctx context.Context, sess store.Session) (string, error) {
	if sess.RootID != "" {
		return sess.RootID, nil
	}
	for range maxTreeDepth {
		if sess.ParentID == "" {
			return sess.ID, nil
		}
		parent, err := a.st.GetSession(ctx, sess.ParentID)
		if err != nil {
			return "", fmt.Errorf("approval: read session %s: %w", sess.ParentID, err)
		}
		sess = parent
	}
	return "", fmt.Errorf("approval: session %s is deeper than %d", sess.ID, maxTreeDepth)
}

// runOf returns the running run or activation of child, waiting for its
// start to commit.
func (a *Approvals) runOf(ctx context.Context, child string) (store.Run, error) {
	wake, stop := a.st.Subscribe(store.LifecycleTopic)
	defer stop()
	tick := time.NewTicker(a.poll)
	defer tick.Stop()
	for {
		runs, err := a.st.ListRuns(ctx, store.RunFilter{ChildID: child, State: store.StateRunning, Limit: 1})
		if err != nil && ctx.Err() == nil {
			return store.Run{}, fmt.Errorf("approval: find the run of %s: %w", child, err)
		}
		if len(runs) > 0 {
			return runs[0], nil
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-ctx.Done():
			return store.Run{}, subagent.Errorf(subagent.EAborted, "the turn ended before its approval was opened")
		}
	}
}

// Await waits until approval ap is closed and returns it closed: decided by
// a person, expired at ap.ExpiresAt (answered by onTimeout: a reject
// option, or none for config.OnTimeoutCancel) or, once ctx ends (the turn
// ended: interrupt, cancel, dispose), cancelled. A close that loses the
// race to a decision returns the decision. Errors are the store's, when
// even the cancelling write failed.
func (a *Approvals) Await(ctx context.Context, ap store.Approval, onTimeout string) (store.Approval, error) {
	wake, stop := a.st.Subscribe(store.LifecycleTopic)
	defer stop()
	tick := time.NewTicker(a.poll)
	defer tick.Stop()
	var expiry <-chan time.Time
	if !ap.ExpiresAt.IsZero() {
		t := time.NewTimer(time.Until(ap.ExpiresAt))
		defer t.Stop()
		expiry = t.C
	}
	for {
		got, err := a.st.GetApproval(ctx, ap.ID)
		switch {
		case err == nil && got.State != store.ApprovalPending:
			return got, nil
		case err != nil && ctx.Err() == nil:
			a.log.WarnContext(ctx, "cannot read a pending approval; trying again", slog.String("approval_id", ap.ID), slog.Any("error", err))
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-expiry:
			return a.expire(context.WithoutCancel(ctx), ap, onTimeout)
		case <-ctx.Done():
			return a.close(context.WithoutCancel(ctx), ap, store.ApprovalClose{State: store.ApprovalCancelled})
		}
	}
}

// expire closes ap as expired with onTimeout's answer.
func (a *Approvals) expire(ctx context.Context, ap store.Approval, onTimeout string) (store.Approval, error) {
	c := store.ApprovalClose{State: store.ApprovalExpired}
	if onTimeout != "cancel" {
		if o, ok := optionOf(ap.Options, false, ""); ok {
			c.Decision = &store.ApprovalDecision{OptionID: o.OptionID, Kind: o.Kind, By: ByTimeout, At: time.Now()}
		}
	}
	return a.close(ctx, ap, c)
}

// close closes ap with c, returning the approval as closed by whichever
// close came first.
func (a *Approvals) close(ctx context.Context, ap store.Approval, c store.ApprovalClose) (store.Approval, error) {
	closed := ap
	closed.State, closed.Decision = c.State, c.Decision
	ev, err := event(EventApprovalDecided, closed)
	if err != nil {
		return store.Approval{}, err
	}
	got, _, err := a.st.CloseApproval(ctx, ap.ID, c, ev)
	if errors.Is(err, store.ErrConflict) {
		return a.st.GetApproval(ctx, ap.ID)
	}
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval: close %s as %s: %w", ap.ID, c.State, err)
	}
	return got, nil
}

// Decision is a person's answer to an approval: either OptionID, one of
// the agent's own options, or Outcome ("allow" or "reject") with an
// optional Scope ("once" or "always"), mapped onto the agent's option of
// that kind.
type Decision struct {
	OptionID string
	Outcome  string
	Scope    string
	Reason   string
}

// Decide closes pending approval id with d on behalf of the context's
// tenant; any replica may decide, and the agent's replica sees it. An
// always option (an outcome with scope "always" maps onto one) also adds a
// rule for the tool call's kind and title to the policy of the approval's
// tree, in the same write, so that the tree's next such request is
// answered without a person (Policy). Returns
// EApprovalNotFound, EInvalidRequest for a malformed decision,
// EOptionUnavailable when the agent offered no option that d names or maps
// onto (no option is ever invented), and EAlreadyDecided when the approval
// was closed first.
func (a *Approvals) Decide(ctx context.Context, id string, d Decision) (store.Approval, error) {
	if err := d.validate(); err != nil {
		return store.Approval{}, err
	}
	ap, err := a.Get(ctx, id)
	if err != nil {
		return store.Approval{}, err
	}
	if ap.State != store.ApprovalPending {
		return store.Approval{}, alreadyDecided(ap)
	}
	var opt store.ApprovalOption
	var ok bool
	if d.OptionID != "" {
		for _, o := range ap.Options {
			if o.OptionID == d.OptionID {
				opt, ok = o, true
				break
			}
		}
		if !ok {
			return store.Approval{}, subagent.Errorf(subagent.EOptionUnavailable, "the agent offered no option %q", d.OptionID)
		}
	} else if opt, ok = optionOf(ap.Options, d.Outcome == "allow", d.Scope); !ok {
		scope := d.Scope
		if scope == "" {
			scope = "once or always"
		}
		return store.Approval{}, subagent.Errorf(subagent.EOptionUnavailable, "the agent offered no %s option (%s)", d.Outcome, scope)
	}
	c := store.ApprovalClose{State: store.ApprovalDecided, Decision: &store.ApprovalDecision{
		OptionID: opt.OptionID, Kind: opt.Kind, By: store.Tenant(ctx), Reason: d.Reason, At: time.Now(),
	}, Always: alwaysRule(ap, opt.Kind)}
	closed := ap
	closed.State, closed.Decision = c.State, c.Decision
	ev, err := event(EventApprovalDecided, closed)
	if err != nil {
		return store.Approval{}, err
	}
	got, _, err := a.st.CloseApproval(ctx, id, c, ev)
	switch {
	case errors.Is(err, store.ErrConflict):
		if now, err := a.st.GetApproval(ctx, id); err == nil {
			return store.Approval{}, alreadyDecided(now)
		}
		return store.Approval{}, subagent.Errorf(subagent.EAlreadyDecided, "approval %s was closed first", id)
	case err != nil:
		return store.Approval{}, fmt.Errorf("approval: decide %s: %w", id, err)
	}
	return got, nil
}

func alreadyDecided(ap store.Approval) error {
	return subagent.Errorf(subagent.EAlreadyDecided, "approval %s is %s already", ap.ID, ap.State)
}

// validate checks the shape of d: one of OptionID and Outcome.
func (d Decision) validate() error {
	fields := map[string]string{}
	switch {
	case d.OptionID != "" && d.Outcome != "":
		fields["optionId"] = "give either optionId or outcome, not both"
	case d.OptionID == "" && d.Outcome == "":
		fields["outcome"] = "give optionId or outcome"
	case d.Outcome != "" && d.Outcome != "allow" && d.Outcome != "reject":
		fields["outcome"] = `must be "allow" or "reject"`
	}
	switch {
	case d.Scope != "" && d.OptionID != "":
		fields["scope"] = "goes with outcome, not optionId"
	case d.Scope != "" && d.Scope != "once" && d.Scope != "always":
		fields["scope"] = `must be "once" or "always"`
	}
	if len(fields) == 0 {
		return nil
	}
	return &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid decision", Fields: fields}
}

// optionOf returns the option of opts for allow (else reject) with scope
// ("once", "always", or "" preferring once).
func optionOf(opts []store.ApprovalOption, allow bool, scope string) (store.ApprovalOption, bool) {
	once, always := KindRejectOnce, KindRejectAlways
	if allow {
		once, always = KindAllowOnce, KindAllowAlways
	}
	var kinds []string
	switch scope {
	case "once":
		kinds = []string{once}
	case "always":
		kinds = []string{always}
	default:
		kinds = []string{once, always}
	}
	for _, k := range kinds {
		for _, o := range opts {
			if o.Kind == k {
				return o, true
			}
		}
	}
	return store.ApprovalOption{}, false
}

// Get returns approval id. Returns EApprovalNotFound.
func (a *Approvals) Get(ctx context.Context, id string) (store.Approval, error) {
	ap, err := a.st.GetApproval(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Approval{}, &subagent.Error{Code: subagent.EApprovalNotFound, Message: fmt.Sprintf("no approval %q", id), Err: err}
	}
	if err != nil {
		return store.Approval{}, fmt.Errorf("approval: read %s: %w", id, err)
	}
	return ap, nil
}

// maxPage is the most rows a store listing returns.
const maxPage = 1000

// Page is one page of a listing; NextCursor is "" on the last.
type Page struct {
	Approvals  []store.Approval
	NextCursor string
}

// List returns a page of the tenant's approvals matching f, oldest first;
// f.AfterID is the previous page's NextCursor. Returns EInvalidRequest for
// an unknown cursor.
func (a *Approvals) List(ctx context.Context, f store.ApprovalFilter) (Page, error) {
	n := f.Limit
	if n <= 0 || n >= maxPage {
		n = min(max(n, 100), maxPage-1)
	}
	f.Limit = n + 1
	list, err := a.st.ListApprovals(ctx, f)
	if errors.Is(err, store.ErrNotFound) {
		return Page{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "unknown cursor",
			Fields: map[string]string{"cursor": "names no approval"}, Err: err}
	}
	if err != nil {
		return Page{}, fmt.Errorf("approval: list: %w", err)
	}
	p := Page{Approvals: list}
	if len(list) > n {
		p.Approvals = list[:n]
		p.NextCursor = list[n-1].ID
	}
	return p, nil
}

// Recover closes, as cancelled by ByOwnerLost, the pending approvals whose
// waiting agent is gone: those whose run is no longer running or whose
// owner's lease lapsed, those of a root session no replica drives and,
// when startup is set, those this replica owned
// before it (re)started — no agent of this process waits yet. Run it at
// start-up and then every lease period. Returns how many it closed.
func (a *Approvals) Recover(ctx context.Context, startup bool) (int, error) {
	pending, err := a.st.PendingApprovals(ctx)
	if err != nil {
		return 0, fmt.Errorf("approval: list pending: %w", err)
	}
	n := 0
	now := time.Now()
	for _, ap := range pending {
		tctx := store.WithTenant(ctx, ap.Tenant)
		orphan := startup && ap.Owner == a.owner
		if !orphan && ap.RunID == "" {
			// A root's own turn: gone once no replica drives the root.
			driven, err := a.st.Driving(tctx, []string{ap.SessionID}, now)
			if err != nil {
				return n, fmt.Errorf("approval: read the driving of %s: %w", ap.SessionID, err)
			}
			orphan = !driven[ap.SessionID]
		} else if !orphan {
			run, err := a.st.GetRun(tctx, ap.RunID)
			switch {
			case errors.Is(err, store.ErrNotFound):
				orphan = true
			case err != nil:
				return n, fmt.Errorf("approval: read run %s: %w", ap.RunID, err)
			default:
				orphan = run.State != store.StateRunning || !run.LeaseUntil.IsZero() && run.LeaseUntil.Before(now)
			}
		}
		if !orphan {
			continue
		}
		got, err := a.close(tctx, ap, store.ApprovalClose{State: store.ApprovalCancelled})
		if err != nil {
			return n, err
		}
		if got.State == store.ApprovalCancelled && got.Decision == nil {
			n++
			a.log.InfoContext(ctx, "cancelled an approval whose agent is gone", slog.String("approval_id", ap.ID), slog.String("run_id", ap.RunID))
		}
	}
	return n, nil
}

// eventPayload is the payload of approval/requested and approval/decided:
// thin, like every lifecycle payload (fetch the approval for more).
type eventPayload struct {
	ApprovalID      string        `json:"approvalId"`
	State           string        `json:"state"`
	RunID           string        `json:"runId"`
	TaskID          string        `json:"taskId,omitempty"`
	SessionID       string        `json:"sessionId"`
	ParentSessionID string        `json:"parentSessionId,omitempty"`
	RootSessionID   string        `json:"rootSessionId"`
	Provider        string        `json:"provider"`
	ToolCall        eventToolCall `json:"toolCall"`
	Decision        *DecisionJSON `json:"decision,omitempty"`
}

type eventToolCall struct {
	ID    string `json:"id"`
	Title string `json:"title,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// DecisionJSON is a decision as the lifecycle payloads and session logs
// record it.
type DecisionJSON struct {
	OptionID string `json:"optionId"`
	Kind     string `json:"kind"`
	By       string `json:"by"`
	Reason   string `json:"reason,omitempty"`
	At       string `json:"at"`
}

// DecisionOf is d as recorded, nil for nil.
func DecisionOf(d *store.ApprovalDecision) *DecisionJSON {
	if d == nil {
		return nil
	}
	return &DecisionJSON{OptionID: d.OptionID, Kind: d.Kind, By: d.By, Reason: d.Reason, At: d.At.UTC().Format(time.RFC3339Nano)}
}

// event is the lifecycle event of type typ about ap.
func event(typ string, ap store.Approval) (store.LifecycleEvent, error) {
	p, err := json.Marshal(eventPayload{
		ApprovalID: ap.ID, State: ap.State, RunID: ap.RunID, TaskID: ap.TaskID, SessionID: ap.SessionID,
		ParentSessionID: ap.ParentID, RootSessionID: ap.RootSessionID, Provider: ap.Provider,
		ToolCall: eventToolCall{ID: ap.ToolCall.ID, Title: ap.ToolCall.Title, Kind: ap.ToolCall.Kind},
		Decision: DecisionOf(ap.Decision),
	})
	if err != nil {
		return store.LifecycleEvent{}, fmt.Errorf("approval: encode %s: %w", typ, err)
	}
	return store.LifecycleEvent{Type: typ, ParentID: ap.ParentID, RootID: ap.RootSessionID, RunID: ap.RunID, Time: time.Now(), Payload: p}, nil
}

// RequestedLog is the payload of approval/requested in the log of the
// session whose agent asked, so its transcript shows the question.
type RequestedLog struct {
	Turn       int         `json:"turn"`
	ApprovalID string      `json:"approvalId"`
	ToolCallID string      `json:"toolCallId"`
	Title      string      `json:"title,omitempty"`
	Kind       string      `json:"kind"`
	Options    []OptionLog `json:"options"`
}

// OptionLog is one answer a RequestedLog offers.
type OptionLog struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// DecidedLog is the payload of approval/decided in the log of the session
// whose agent asked.
type DecidedLog struct {
	Turn       int           `json:"turn"`
	ApprovalID string        `json:"approvalId"`
	State      string        `json:"state"`
	Decision   *DecisionJSON `json:"decision,omitempty"`
}

// Requested is the approval/requested entry of pending approval ap, asked
// in turn.
func Requested(turn int, ap store.Approval) RequestedLog {
	opts := make([]OptionLog, len(ap.Options))
	for i, o := range ap.Options {
		opts[i] = OptionLog(o)
	}
	return RequestedLog{Turn: turn, ApprovalID: ap.ID, ToolCallID: ap.ToolCall.ID, Title: ap.ToolCall.Title, Kind: ap.ToolCall.Kind, Options: opts}
}

// Decided is the approval/decided entry of closed approval ap, asked in
// turn.
func Decided(turn int, ap store.Approval) DecidedLog {
	return DecidedLog{Turn: turn, ApprovalID: ap.ID, State: ap.State, Decision: DecisionOf(ap.Decision)}
}

// SweepOrphans runs Recover every period until ctx ends: the approvals of a
// replica that died are cancelled once its runs' leases lapse.
func (a *Approvals) SweepOrphans(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := a.Recover(ctx, false); err != nil && ctx.Err() == nil {
				a.log.ErrorContext(ctx, "cancel the approvals of lost owners", slog.Any("error", err))
			}
		}
	}
}
