package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// StartContinuable creates a continuable child and accepts its prompt
// (docs/seam.md §11). It answers once the prompt is durably accepted into the
// child's inbox and handed to its first activation — before any model
// request (R57).
//
// The checks, in order (R53): admission (EDraining); maxDepth domain
// (EInvalidMaxDepth); the child id — the caller's or a fresh UUID — is not
// live (EDuplicateChild); child depth and cap (EInvalidMaxDepth,
// EDepthExceeded); the tree's limits (Config.Governor: ELimitExceeded,
// ERateLimited, EBudgetExhausted, EDeadlineExceeded, the tree's depth
// cap); label, prompt and maxTokens (EInvalidRequest); the
// continuable descriptor snapshot (EInvalidRequest); the provider
// (ENoProvider) and its PrepareContinuable (EUnsupportedCapability, R55);
// ctx (EAborted); then, in the child's loop, live and persisted ids again
// (EDuplicateChild, R62), a free live-run slot of the tenant (ERateLimited,
// Config.MaxLiveRuns; the activation holds it until it settles) and the
// materializer's checks. Capability flags are
// not consulted (R63) and the provider's Start is never called (R54).
//
// ctx is the caller's cancellation until acceptance (R61). A failure before
// acceptance leaves no live agent, no accepted message and no notice
// (R59); when it comes after the activation's start edge, that edge gets
// its end (R60). The durable log is append-only: a failure after the child
// session was written leaves it in the store without a turn.
func (m *Manager) StartContinuable(ctx context.Context, req ContinuableRequest) (ContinuableStarted, error) {
	if err := m.admitting(); err != nil {
		return ContinuableStarted{}, err
	}
	if err := subagent.CheckMaxDepth(req.MaxDepth); err != nil {
		return ContinuableStarted{}, err
	}
	childID := req.ChildID
	if childID == "" {
		childID = uuid.NewString()
	}
	key := resident.Key{Tenant: store.Tenant(ctx), ID: childID}
	if m.liveActivation(key) != nil {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	depth, err := subagent.ChildDepth(req.Parent, req.MaxDepth)
	if err != nil {
		return ContinuableStarted{}, err
	}
	limits, admitted, err := m.svc.AdmitTree(ctx, req.Parent, req.Limits)
	if err != nil {
		return ContinuableStarted{}, err
	}
	defer admitted()
	opts, err := continuableRoute(req)
	if err != nil {
		return ContinuableStarted{}, err
	}
	desc := subagent.Descriptor{Mode: subagent.ModeContinuable, Provider: req.Provider, Label: req.Label,
		AgentProvider: opts.Provider, AgentModel: opts.Model, Persona: subagent.ClonePtr(req.Persona)}
	if f := req.ToolFilter; f != nil {
		desc.ToolFilter = &subagent.ToolFilter{Allow: slices.Clone(f.Allow), Deny: slices.Clone(f.Deny)}
	}
	raw, err := subagent.SnapshotDescriptor(desc)
	if err != nil {
		return ContinuableStarted{}, err
	}
	p, ok := m.svc.Provider(req.Provider)
	if !ok {
		return ContinuableStarted{}, subagent.Errorf(subagent.ENoProvider, "no subagent provider named %q", req.Provider)
	}
	cp, ok := p.(subagent.ContinuableProvider)
	if !ok {
		return ContinuableStarted{}, subagent.Errorf(subagent.EUnsupportedCapability, "provider %q does not support continuable children", req.Provider)
	}
	spec, err := cp.PrepareContinuable(ctx, subagent.ContinuableCreateRequest{SessionID: childID, Parent: req.Parent})
	if err != nil {
		if ctx.Err() != nil {
			return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
		}
		return ContinuableStarted{}, fmt.Errorf("prepare continuable %s child: %w", req.Provider, err)
	}
	for i, e := range spec.Seed {
		if e.Seq != int64(i) {
			return ContinuableStarted{}, fmt.Errorf("prepare continuable %s child: seed event %d has seq %d, want contiguous from 0", req.Provider, i, e.Seq)
		}
	}
	if ctx.Err() != nil {
		return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
	}

	var res ContinuableStarted
	plan := startPlan{desc: desc, raw: raw, spec: spec, depth: depth, opts: opts, limits: limits}
	m.do(key, func(c *child) { res, err = m.startIn(ctx, c, req, plan) })
	return res, err
}

// startPlan is what StartContinuable resolved before the child's loop:
// the descriptor and its snapshot, the provider's spec, the child's depth,
// route and stored limits.
type startPlan struct {
	desc   subagent.Descriptor
	raw    json.RawMessage
	spec   subagent.ContinuableSpec
	depth  int
	opts   subagent.AgentOptions
	limits store.Limits
}

// startIn is StartContinuable from the admission check on, run in the
// child's loop.
func (m *Manager) startIn(ctx context.Context, c *child, req ContinuableRequest, plan startPlan) (_ ContinuableStarted, err error) {
	desc, raw, spec, depth, opts := plan.desc, plan.raw, plan.spec, plan.depth, plan.opts
	key, childID := c.key, c.key.ID
	if err := m.admitting(); err != nil {
		return ContinuableStarted{}, err
	}
	if c.act != nil {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	switch _, err := m.store.GetSession(ctx, childID); {
	case err == nil:
		return ContinuableStarted{}, duplicateChild(childID)
	case !errors.Is(err, store.ErrNotFound):
		return ContinuableStarted{}, fmt.Errorf("start continuable child %s: %w", childID, err)
	}
	// The live-run slot is taken before anything is written; the activation
	// holds it from begin on, and rollback or settle gives it back.
	release, err := m.svc.ReserveLive(key.Tenant, false)
	if err != nil {
		return ContinuableStarted{}, err
	}
	var act *activation
	defer func() {
		if act == nil {
			release()
		}
	}()
	parent := req.Parent.Session
	header := store.Session{
		ID: childID, ParentID: parent.ID, RootID: store.RootOf(parent), Origin: OriginSubagent, DelegationDepth: depth,
		SeedLength: len(spec.Seed), Cwd: parent.Cwd, Label: req.Label, Provider: req.Provider,
		Mode: subagent.ModeContinuable, AgentProvider: opts.Provider, AgentModel: opts.Model,
		MaxTokens: opts.MaxTokens, Persona: subagent.ClonePtr(req.Persona), Limits: plan.limits, CreatedAt: time.Now(), WakeParent: req.WakeParent,
	}
	// This replica drives the child from here: its lease first.
	if err := m.children.Hold(ctx, c.key); err != nil {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	// Store writes must not be cut half-way by the caller's cancellation;
	// ctx is checked between the steps instead. The child's writes are
	// fenced by its lease.
	base := m.ctl.Fenced(context.WithoutCancel(ctx))
	tr := subagent.RunTrace{Parent: telemetry.Traceparent(ctx)}
	base, tr.Inv = telemetry.StartInvoke(base, m.svc.InvokeParams(req.Provider, childID))
	defer func() {
		if act == nil {
			tr.Inv.End(subagent.StopAborted, err)
		}
	}()
	inc := &materialized{}
	mat := m.materializer(req.Provider)
	if prep, ok := mat.(subagent.ChildPreparer); ok {
		var msgID string
		act, msgID, err = m.startPrepared(ctx, base, c, prep, startArgs{header: header, desc: desc, opts: opts, prompt: req.Prompt,
			log: creationLog(spec.Seed, raw), inc: inc, release: release, tr: tr})
		if err != nil {
			act = nil
			return ContinuableStarted{}, err
		}
		return ContinuableStarted{ChildID: childID, TaskID: act.taskID, MessageID: msgID}, nil
	}
	ag, err := mat.Materialize(base, subagent.MaterializeRequest{Session: header, Descriptor: desc, Options: opts,
		Create: func(ctx context.Context) error { return m.create(ctx, header, spec.Seed, raw) },
		Report: m.reporter(key, inc)})
	if errors.Is(err, store.ErrConflict) {
		return ContinuableStarted{}, duplicateChild(childID)
	}
	if err != nil {
		return ContinuableStarted{}, fmt.Errorf("start continuable child %s: %w", childID, err)
	}
	if ctx.Err() != nil {
		m.closeAgent(base, childID, ag)
		return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
	}
	act, err = m.begin(base, c, ag, header, desc, inc, release, tr)
	if err != nil {
		act = nil
		m.closeAgent(base, childID, ag)
		return ContinuableStarted{}, err
	}
	if ctx.Err() != nil {
		m.rollback(act)
		return ContinuableStarted{}, abortedBeforeAcceptance(ctx)
	}
	row, err := newRow(childID, req.Prompt, sessionlog.Source{Kind: subagent.SourceUser})
	if err == nil {
		err = m.store.Enqueue(base, row)
	}
	if err != nil {
		m.rollback(act)
		return ContinuableStarted{}, fmt.Errorf("accept prompt of continuable child %s: %w", childID, err)
	}
	// Accepted: from here the caller's cancellation changes nothing (R61).
	if err := m.open(act, row); err != nil {
		m.ack(base, childID, row.ID) // withdrawn: the caller sees the error (R73)
		m.rollback(act)
		return ContinuableStarted{}, err
	}
	c.sess, c.desc = &header, &desc
	c.activate(act, actSteering)
	return ContinuableStarted{ChildID: childID, TaskID: act.taskID, MessageID: row.ID}, nil
}

// OriginSubagent is the header origin of every child session.
const OriginSubagent = "subagent"

// continuableRoute is the child's route for its first activation: the
// parent's provider, model and maxTokens, overridden field-wise by the
// request's (R45, R56). Returns EInvalidRequest for an empty label or
// prompt, content that is not JSON, or a negative maxTokens.
func continuableRoute(req ContinuableRequest) (subagent.AgentOptions, error) {
	switch {
	case req.Label == "":
		return subagent.AgentOptions{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "a continuable child needs a label",
			Fields: map[string]string{"label": "required"}}
	case len(req.Prompt) == 0:
		return subagent.AgentOptions{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "a continuable child needs a prompt",
			Fields: map[string]string{"prompt": "required"}}
	}
	if _, err := json.Marshal(req.Prompt); err != nil {
		return subagent.AgentOptions{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "prompt content is not valid JSON",
			Fields: map[string]string{"prompt": "not valid JSON"}, Err: err}
	}
	return subagent.ChildOptions(req.Parent.Options, req.AgentOptions)
}

// create writes a continuable child's header and creation log
// (docs/seam.md §10), in one commit: the seed verbatim, session/end-seed after it, the
// descriptor, session/end-seed, and the delegation approval pin (R49) —
// all before the first turn, so the descriptor is in the own suffix (seq
// >= seedLength) and never reaches the model.
func (m *Manager) create(ctx context.Context, header store.Session, seed []store.Event, descriptor json.RawMessage) error {
	if _, err := m.store.CreateSessionWithEvents(ctx, header, creationLog(seed, descriptor)...); err != nil {
		return fmt.Errorf("create child session: %w", err)
	}
	return nil
}

// creationLog is a new child's log before its first turn: seed (a fork
// child's, closed by session/end-seed), the continuable descriptor, and
// the delegation pin.
func creationLog(seed []store.Event, descriptor json.RawMessage) []store.NewEvent {
	endSeed := store.NewEvent{Type: sessionlog.EventEndSeed, Data: json.RawMessage(`{}`)}
	var evs []store.NewEvent
	for _, e := range seed {
		evs = append(evs, store.NewEvent{Type: e.Type, Time: e.Time, Data: e.Data})
	}
	if n := len(seed); n > 0 && seed[n-1].Type != sessionlog.EventEndSeed {
		evs = append(evs, endSeed)
	}
	return append(evs,
		store.NewEvent{Type: sessionlog.EventDescriptor, Data: descriptor},
		endSeed,
		sessionlog.DelegationPin())
}

// startArgs is a new child's start as startPrepared takes it.
type startArgs struct {
	header  store.Session
	desc    subagent.Descriptor
	opts    subagent.AgentOptions
	prompt  []model.Block
	log     []store.NewEvent // the creation log
	inc     *materialized
	release func() // the live-run slot
	tr      subagent.RunTrace
}

// startPrepared starts a new child whose agent prep builds before anything
// is stored: the child's header and creation log, its prompt and the
// opening of its first turn, and the activation's run row and
// subagent/start are one commit (store.StartRunWithSession); then the
// first turn runs. The prompt is logged in that commit, so it needs no
// inbox row: accepted and delivered are one. On error nothing is stored
// and the caller still holds the live-run slot. It returns the activation
// and the prompt's message id. It runs in c's loop.
func (m *Manager) startPrepared(ctx, base context.Context, c *child, prep subagent.ChildPreparer, a startArgs) (*activation, string, error) {
	childID := c.key.ID
	row, err := newRow(childID, a.prompt, sessionlog.Source{Kind: subagent.SourceUser})
	if err != nil {
		return nil, "", fmt.Errorf("accept prompt of continuable child %s: %w", childID, err)
	}
	msg, err := RowMessage(row)
	if err != nil {
		return nil, "", fmt.Errorf("accept prompt of continuable child %s: %w", childID, err)
	}
	p, err := prep.PrepareChild(base, subagent.MaterializeRequest{Session: a.header, Descriptor: a.desc, Options: a.opts,
		Log: a.log, Report: m.reporter(c.key, a.inc)}, msg)
	if err != nil {
		return nil, "", fmt.Errorf("start continuable child %s: %w", childID, err)
	}
	if ctx.Err() != nil {
		m.closeAgent(base, childID, p.Agent)
		return nil, "", abortedBeforeAcceptance(ctx)
	}
	act, run, start, err := m.activation(base, c, p.Agent, a.header, a.desc, a.release, a.tr)
	var log []store.Event
	if err == nil {
		log, start, err = m.store.StartRunWithSession(base, store.StartRunParams{Session: a.header, Events: append(a.log, p.Opening...), Run: run, Start: start})
	}
	if err != nil {
		m.closeAgent(base, childID, p.Agent)
		if errors.Is(err, store.ErrConflict) {
			return nil, "", duplicateChild(childID)
		}
		return nil, "", fmt.Errorf("start continuable child %s: %w", childID, err)
	}
	// Accepted: from here the caller's cancellation changes nothing (R61).
	m.published(act, a.inc, start)
	p.Launch(log)
	c.sess, c.desc = &a.header, &a.desc
	c.activate(act, actSteering)
	return act, row.ID, nil
}

func duplicateChild(id string) error {
	return subagent.Errorf(subagent.EDuplicateChild, "subagent %q already exists", id)
}

func abortedBeforeAcceptance(ctx context.Context) error {
	return &subagent.Error{Code: subagent.EAborted, Message: "subagent request was aborted before its prompt was accepted", Err: context.Cause(ctx)}
}
