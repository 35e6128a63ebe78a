package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// Continuable ACP children. An agent that advertises session persistence
// (loadSession or sessionCapabilities.resume) keeps the child's
// conversation in one ACP session, whose id the child log records
// (acp/session). Each activation the children.Manager starts gets a
// liveChild: the agent process the last activation left idle, or a new one
// that resumes the session (session/resume where offered, else
// session/load, whose replayed history is not logged again). Every turn is
// one session/prompt; a followup during a turn is queued as the next
// prompt, since ACP has no mid-turn injection.

var (
	_ subagent.ContinuableProvider = (*Provider)(nil)
	_ subagent.Materializer        = (*Provider)(nil)
	_ subagent.ChildAgent          = (*liveChild)(nil)
	_ subagent.Queuer              = (*liveChild)(nil)
)

// PrepareContinuable accepts a continuable child when the agent can resume
// sessions, waiting for the probe under way or starting the agent once to
// find out if no agent of this provider was initialized yet (learnCaps).
// Returns EUnsupportedCapability when it cannot, and the probe's
// EAgentUnavailable or EAborted error.
func (p *Provider) PrepareContinuable(ctx context.Context, _ subagent.ContinuableCreateRequest) (subagent.ContinuableSpec, error) {
	if err := p.learnCaps(ctx); err != nil {
		return subagent.ContinuableSpec{}, err
	}
	if !p.CanResume() {
		return subagent.ContinuableSpec{}, p.notContinuable()
	}
	return subagent.ContinuableSpec{}, nil
}

// notContinuable is the EUnsupportedCapability error of an agent that
// cannot resume sessions.
func (p *Provider) notContinuable() error {
	return subagent.Errorf(subagent.EUnsupportedCapability,
		"provider %q does not support continuable children: its agent advertises neither session/resume nor session/load", p.cfg.Name)
}

// Materialize builds the live agent of a continuable child. On
// creation it starts the agent and opens a new ACP session before
// req.Create, so a failed start writes nothing, then records the session
// id. On resume it takes up the child's idle agent, or starts one and
// resumes the recorded session. The child's model route, persona and tool
// filter do not apply: the agent runs its own.
//
// Returns EInvalidRequest for an unusable cwd, EAgentUnavailable when the
// agent cannot be started or refuses the session, ENotResumable when the
// log records no session or the agent can no longer resume, Create's error
// unchanged, and other (internal) errors when the log cannot be read or
// written.
func (p *Provider) Materialize(ctx context.Context, req subagent.MaterializeRequest) (subagent.ChildAgent, error) {
	cwd, err := p.workdir(req.Session.Cwd)
	if err != nil {
		return nil, err
	}
	id := req.Session.ID
	r := &liveChild{p: p, key: idleKey{store.Tenant(ctx), id}, cwd: cwd}
	r.Child = turnlog.NewChild(ctx, turnlog.ChildParams{Store: p.store, ID: id, Name: "ACP", Log: p.log, Turns: r})
	if req.Create != nil {
		if err := r.create(ctx, req.Create); err != nil {
			return nil, err
		}
		return r, nil
	}
	if err := r.load(ctx); err != nil {
		return nil, err
	}
	if r.live, err = r.wake(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// liveChild is the live agent of one activation of a continuable ACP
// child: a turnlog.Child whose turns are session/prompts.
type liveChild struct {
	p   *Provider
	key idleKey
	cwd string // checked at materialization
	*turnlog.Child

	// The Child's lock guards the fields below.
	//
	// The child log is the record of what the agent did; a liveChild
	// keeps only what its turns and settlement need, however long the
	// agent lives and however much it streams: the running turn's
	// (bounded) text, the outcome fold (which takes a turn's text from the
	// assistant/message that ends it, never from its chunks) and the
	// user/messages (Events).
	live    *live // nil once closed
	session sdk.SessionId
	cur     *acpTurn // the running turn
}

// acpTurn is one turn: one session/prompt.
type acpTurn struct {
	n       int
	content []model.Block // the prompt
	text    turnlog.Output
	stop    chan struct{} // closed by Cancel, or when the log failed
	ended   chan struct{} // closed once the turn is closed
	cause   string
	// failed: a write to the child log failed, so the turn was stopped and
	// fails.
	failed bool
	// late says why the turn was stopped at its tree's deadline ("" when
	// it was not).
	late string
	// prompting: the prompt was sent, so updates are this turn's (a
	// session/load replays history before any turn).
	prompting bool
}

// stopped is the outcome of a turn whose prompt was stopped: an error when
// its log could not be written, else aborted by its cause. Read it once
// t.stop is closed, or with the lock held.
func (t *acpTurn) stopped() turnlog.Outcome {
	if t.failed {
		return turnlog.Outcome{Reason: subagent.StopError, Diagnostic: turnlog.LogFailed}
	}
	if t.late != "" {
		return turnlog.Outcome{Reason: subagent.StopDeadlineExceeded, Diagnostic: t.late}
	}
	return turnlog.Outcome{Reason: subagent.StopAborted, Cause: t.cause}
}

// create starts the agent, opens its session, writes the child through
// createChild and records the session id.
func (r *liveChild) create(ctx context.Context, createChild func(context.Context) error) error {
	cwd := r.cwd
	l, err := r.p.launch(ctx, cwd, r, r.Log)
	if err != nil {
		return err
	}
	session, err := l.newSession(ctx, cwd)
	if err == nil && !resumable(l.caps) {
		err = r.p.notContinuable()
	}
	if err == nil {
		err = createChild(ctx)
	}
	if err == nil {
		err = r.load(ctx)
	}
	if err == nil {
		err = r.AppendLocked(turnlog.Event{Type: sessionlog.EventACPSession, Data: sessionlog.ACPSessionData{SessionID: string(session)}})
	}
	if err != nil {
		l.discard()
		return err
	}
	r.live, r.session = l, session
	return nil
}

// load reads the child log, a page at a time, for its ACP session, its
// turn count and its user/messages, and closes a turn a crash left open.
func (r *liveChild) load(ctx context.Context) error {
	open, err := r.Load(ctx, func(e store.Event) {
		var d sessionlog.ACPSessionData
		if e.Type == sessionlog.EventACPSession && json.Unmarshal(e.Data, &d) == nil {
			r.session = sdk.SessionId(d.SessionID)
		}
	})
	if err != nil {
		return err
	}
	if open != 0 {
		if err := r.AppendLocked(turnlog.Close(open, 1, nil, turnlog.CutOff)...); err != nil {
			return err
		}
	}
	return nil
}

// wake returns the agent of a resumed child: the one its last activation
// left idle, else a new process that resumes the recorded session.
func (r *liveChild) wake(ctx context.Context) (*live, error) {
	if r.session == "" {
		return nil, subagent.Errorf(subagent.ENotResumable, "ACP child %q has no recorded agent session", r.key.id)
	}
	if l := r.p.unpark(r.key, r.session); l != nil {
		l.attach(r)
		return l, nil
	}
	cwd := r.cwd
	l, err := r.p.launch(ctx, cwd, r, r.Log)
	if err != nil {
		return nil, err
	}
	switch caps := l.caps; {
	case caps.SessionCapabilities.Resume != nil:
		err = l.call(ctx, "session/resume", func(ctx context.Context) error {
			_, err := l.conn.ResumeSession(ctx, sdk.ResumeSessionRequest{SessionId: r.session, Cwd: cwd, McpServers: []sdk.McpServer{}})
			return err
		})
	case caps.LoadSession:
		// The agent replays the conversation as session/updates; no turn
		// runs, so none of it is logged again.
		err = l.call(ctx, "session/load", func(ctx context.Context) error {
			_, err := l.conn.LoadSession(ctx, sdk.LoadSessionRequest{SessionId: r.session, Cwd: cwd, McpServers: []sdk.McpServer{}})
			return err
		})
	default:
		err = subagent.Errorf(subagent.ENotResumable, "the agent of provider %q can no longer resume sessions", r.p.cfg.Name)
	}
	if err != nil {
		l.discard()
		return nil, err
	}
	return l, nil
}

func resumable(caps sdk.AgentCapabilities) bool {
	return caps.LoadSession || caps.SessionCapabilities.Resume != nil
}

// OpenTurn makes turn n of msg, one session/prompt, the running turn
// (turnlog.Turns). The lock is held.
func (r *liveChild) OpenTurn(n int, msg sessionlog.UserMessage) {
	r.cur = &acpTurn{n: n, content: msg.Content, stop: make(chan struct{}), ended: make(chan struct{})}
}

// RunTurn prompts the running turn, closes it and opens the next queued
// one; it reports whether it did (turnlog.Turns).
func (r *liveChild) RunTurn() bool {
	r.Lock()
	t, l, session := r.cur, r.live, r.session
	t.prompting = true
	r.Unlock()
	held := turnlog.HoldTo(r.LogCtx, r.p.deadlines, r.ID, r.Log, func(o turnlog.Outcome) { r.stopLate(t, o) })
	o := r.prompt(l, session, t, t.content)
	held()

	r.Lock()
	defer r.Unlock()
	if t.failed {
		o = t.stopped()
	}
	ended := r.CloseTurnLocked(t.n, t.text.Blocks(), o)
	r.cur = nil
	close(t.ended)
	return r.NextLocked(ended)
}

// prompt runs turn t's prompt and says how the turn ended. A cancelled turn
// is aborted; an agent that does not answer its cancellation within the
// dispose grace is stopped, so no late answer reaches a later turn. When
// an earlier turn lost the agent, a new one resumes the session first.
func (r *liveChild) prompt(l *live, session sdk.SessionId, t *acpTurn, content []model.Block) turnlog.Outcome {
	if l == nil {
		ctx, cancel := context.WithCancel(r.LogCtx)
		go func() {
			select {
			case <-t.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		var err error
		l, err = r.wake(ctx)
		cancel()
		if err != nil {
			select {
			case <-t.stop:
				return t.stopped()
			default:
			}
			return turnlog.Outcome{Reason: subagent.StopError, Diagnostic: subagent.ErrorMessage(err)}
		}
		r.Lock()
		closed := r.ClosedLocked()
		if !closed {
			r.live = l
		}
		r.Unlock()
		if closed {
			l.discard()
			return t.stopped()
		}
	}
	resp, err := l.prompt(session, sdkBlocks(turnlog.TextOnly(content)), t.stop, r.p.cfg.DisposeGrace, telemetry.Traceparent(r.LogCtx))
	select {
	case <-t.stop:
		if err != nil {
			r.dropLive(l)
		}
		return t.stopped()
	default:
	}
	if err != nil {
		diagnostic := l.failure(err)
		r.Log.Warn("ACP child's turn failed", slog.String("diagnostic", diagnostic), slog.Any("error", err))
		if errors.Is(err, errExited) || disconnected(err) {
			r.dropLive(l)
		}
		return turnlog.Outcome{Reason: subagent.StopError, Diagnostic: diagnostic}
	}
	o := stopOutcome(resp.StopReason)
	if u := resp.Usage; u != nil {
		o.Usage = &sessionlog.UsageData{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	}
	return o
}

// dropLive stops an agent that can no longer be trusted with the session
// (it died, or never answered a cancellation); a later activation starts a
// new one and resumes.
func (r *liveChild) dropLive(l *live) {
	r.Lock()
	if r.live == l {
		r.live = nil
	}
	r.Unlock()
	go func() {
		if err := l.release(false, ""); err != nil {
			r.Log.Error("ACP agent not reaped", slog.Any("error", err))
		}
	}()
}

// sessionUpdate logs the running prompt's progress. A write that fails
// stops the turn, which then fails.
func (r *liveChild) sessionUpdate(n sdk.SessionNotification) {
	r.Lock()
	defer r.Unlock()
	t := r.cur
	if t == nil || !t.prompting || t.failed || n.SessionId != r.session {
		return
	}
	if typ, payload, text, ok := logUpdate(n.Update, t.n, 1); ok {
		if err := r.AppendLocked(turnlog.Event{Type: typ, Data: payload}); err != nil {
			r.failLocked(t, typ, err)
			return
		}
		t.text.Add(text)
	}
}

// requestPermission answers by the policy (verdict); "cancelled" when no
// turn runs, it was cancelled, or its log cannot be written. A request the
// policy asks about waits for a person (ask) until the turn is stopped or
// closed.
func (r *liveChild) requestPermission(req sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	v := r.p.verdict(r.LogCtx, r.ID, req)
	r.Lock()
	t := r.cur
	cancelled := t == nil
	n := 0 // no turn runs: nothing is logged
	if t != nil {
		n = t.n
		select {
		case <-t.stop:
			cancelled = true
		default:
		}
	}
	if !cancelled && v.Decision == config.PermissionAsk {
		r.Unlock()
		return r.p.ask(r.LogCtx, r.ID, n, req, v, r.recorder(t), t.stop, t.ended)
	}
	defer r.Unlock()
	resp, d := decide(req, v.Decision, cancelled, n)
	if t != nil && !t.failed {
		if err := r.AppendLocked(turnlog.Event{Type: sessionlog.EventACPPermission, Data: d}); err != nil {
			r.failLocked(t, sessionlog.EventACPPermission, err)
			return permissionCancelled()
		}
	}
	return resp
}

// recorder writes events of turn t to the child log while t runs; a
// failed write stops t and is returned.
func (r *liveChild) recorder(t *acpTurn) func(evs ...turnlog.Event) error {
	return func(evs ...turnlog.Event) error {
		r.Lock()
		defer r.Unlock()
		if r.cur != t || t.failed {
			return nil
		}
		if err := r.AppendLocked(evs...); err != nil {
			r.failLocked(t, evs[0].Type, err)
			return err
		}
		return nil
	}
}

// failLocked stops turn t after a write to its log failed: a turn never
// settles with events missing from its log. The lock is held.
func (r *liveChild) failLocked(t *acpTurn, typ string, err error) {
	r.Log.Error("cannot write the ACP child log; stopping its turn", slog.String("event", typ), slog.Any("error", err))
	t.failed = true
	r.stopLocked(t)
}

// stopLocked closes t.stop, unless it is closed, and sends session/cancel
// for the prompt. The lock is held.
func (r *liveChild) stopLocked(t *acpTurn) {
	select {
	case <-t.stop:
		return
	default:
	}
	close(t.stop)
	if l := r.live; l != nil {
		go l.sendCancel(r.session)
	}
}

// Cancel sends session/cancel for the running turn, which ends aborted
// with cause, and drops the queued prompts: the manager's durable inbox
// still holds them (keepInbox is therefore the same as not).
func (r *liveChild) Cancel(cause string, _ bool) {
	r.Lock()
	defer r.Unlock()
	r.DropLocked()
	t := r.cur
	if t == nil {
		return
	}
	select {
	case <-t.stop:
		return
	default:
	}
	t.cause = cause
	r.stopLocked(t)
}

// stopLate stops turn t, if it still runs, to end as o: its tree's deadline
// passed (turnlog.HoldTo).
func (r *liveChild) stopLate(t *acpTurn, o turnlog.Outcome) {
	r.Lock()
	defer r.Unlock()
	select {
	case <-t.stop:
		return
	default:
	}
	if r.cur != t {
		return
	}
	t.late = o.Diagnostic
	r.stopLocked(t)
}

// Close cancels the running turn, waits for it to end and leaves the
// agent idle for the next activation (the provider's idle timeout stops
// it). Returns ctx's error when the turn outlasts it.
func (r *liveChild) Close(ctx context.Context) error {
	l, err := r.shut(ctx, "close")
	if err != nil {
		return err
	}
	if l != nil {
		r.p.park(r.key, l, r.session)
	}
	return nil
}

// Discard is Close for a disposed child (children.Discarder): nothing is
// kept for a next activation, so the agent's process is stopped before
// it returns.
func (r *liveChild) Discard(ctx context.Context) error {
	l, err := r.shut(ctx, "discard")
	if err != nil {
		return err
	}
	if l != nil {
		l.attach(ignore{})
		if err := l.release(true, r.session); err != nil {
			return fmt.Errorf("discard ACP child %s: %w", r.ID, err)
		}
	}
	return nil
}

// shut cancels the running turn, waits for it to end and closes the
// agent (turnlog.Child.Shut), taking its process from it: nil when it has
// none. Returns ctx's error, for verb, when the turn outlasts it.
func (r *liveChild) shut(ctx context.Context, verb string) (*live, error) {
	r.Cancel(sessionlog.CauseDisposed, false)
	var l *live
	err := r.Shut(ctx, verb, func() { l, r.live = r.live, nil })
	return l, err
}

// ForgetChild stops the agent an earlier activation of child childID of
// ctx's tenant left idle, if one still runs (children.ChildForgetter: the
// child was disposed), and returns once it is gone.
func (p *Provider) ForgetChild(ctx context.Context, childID string) {
	key := idleKey{store.Tenant(ctx), childID}
	p.idleMu.Lock()
	ia := p.idle[key]
	delete(p.idle, key)
	p.idleMu.Unlock()
	if ia != nil {
		ia.timer.Stop()
		p.stopIdle(ia.live, ia.session)
	}
}

// idleKey identifies a continuable child across tenants.
type idleKey struct{ tenant, id string }

// idleAgent is an agent kept running between two activations of its child.
type idleAgent struct {
	live    *live
	session sdk.SessionId
	timer   *time.Timer
}

// park keeps l running for the child's next activation, for the idle
// timeout; then, or at Close, it is stopped (session/close, short graces).
func (p *Provider) park(key idleKey, l *live, session sdk.SessionId) {
	l.attach(ignore{})
	p.idleMu.Lock()
	if p.closing || p.cfg.IdleTimeout <= 0 {
		p.idleMu.Unlock()
		p.stopIdle(l, session)
		return
	}
	if old := p.idle[key]; old != nil {
		// Cannot happen while the manager runs one activation per child;
		// never leak a process if it does.
		old.timer.Stop()
		go p.stopIdle(old.live, old.session)
	}
	ia := &idleAgent{live: l, session: session}
	ia.timer = time.AfterFunc(p.cfg.IdleTimeout, func() {
		p.idleMu.Lock()
		mine := p.idle[key] == ia
		if mine {
			delete(p.idle, key)
		}
		p.idleMu.Unlock()
		if mine {
			p.stopIdle(l, session)
		}
	})
	p.idle[key] = ia
	p.idleMu.Unlock()
}

// unpark takes the idle agent of key for session, if one is still running.
func (p *Provider) unpark(key idleKey, session sdk.SessionId) *live {
	p.idleMu.Lock()
	ia := p.idle[key]
	delete(p.idle, key)
	p.idleMu.Unlock()
	if ia == nil {
		return nil
	}
	ia.timer.Stop()
	select {
	case <-ia.live.proc.exited:
	default:
		if ia.session == session {
			return ia.live
		}
	}
	go p.stopIdle(ia.live, ia.session)
	return nil
}

func (p *Provider) stopIdle(l *live, session sdk.SessionId) {
	if err := l.release(true, session); err != nil {
		p.log.Error("idle ACP agent not reaped", slog.Any("error", err))
	}
}

// Close stops every idle agent and every one parked later. It returns once
// they are gone; errors name groups that survived SIGKILL.
func (p *Provider) Close() error {
	p.idleMu.Lock()
	p.closing = true
	all := make([]*idleAgent, 0, len(p.idle))
	for key, ia := range p.idle {
		ia.timer.Stop()
		all = append(all, ia)
		delete(p.idle, key)
	}
	p.idleMu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, ia := range all {
		wg.Go(func() { errs[i] = ia.live.release(true, ia.session) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
