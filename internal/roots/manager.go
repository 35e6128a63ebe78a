package roots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Store holds the root sessions and their logs. Required.
	Store store.Store
	// Routes resolves a root session's agentOptions; nil means no model is
	// configured, so every turn ends with reason error.
	Routes *model.Routes
	// Tools is the deployment-global tool registry (delegation and control
	// tools included) every root agent sees, unfiltered.
	Tools *agent.Registry
	// DeploymentPersona and Vars are as for in-process children
	// (inprocess.Deps), so that a root and its children render personas
	// alike.
	DeploymentPersona string
	Vars              map[string]func() (string, bool)
	// Logger receives notice delivery failures. Required.
	Logger *slog.Logger
	// Control, when set, is the cross-replica control of this replica
	// (subagent.Service.Control): a root is driven only under its resident
	// lease, and prompts and notices for a root another replica drives go
	// there. Nil means a single process: no leases.
	Control *resident.Control
	// Metrics counts the tokens of the root agents' model calls; nil
	// counts nothing.
	Metrics *telemetry.Metrics
	// Budget, when set, holds a root's prompts in its durable inbox while
	// its tree is paused (internal/governance): DeliverWaiting delivers
	// them once it resumes. It is also the root agents' step gate.
	Budget Budget
}

// Budget is what the Manager asks of a tree's limits; *governance.Limits
// implements it.
type Budget interface {
	agent.Gate
	// Paused reports whether root session id's tree spent its budget.
	Paused(ctx context.Context, id string) (bool, error)
}

// RootAgent is the gen_ai.agent.name of a root session's turns: each is
// an invoke_agent span of its own.
const RootAgent = "root"

// Manager runs the agents of root sessions: one live *agent.Agent per root
// session, created on demand from the session header and its log, so that an
// agent closed while idle (CloseIdle) continues where its log ends. It also
// delivers settlement notices and child reports to root parents (Notify).
//
// Every message the Manager accepts — a prompt, a notice, a report — is first a
// row of the durable inbox (see children.InboxRow), acknowledged once the
// root's log holds it as a user/message; loading an agent delivers the rows
// its log lacks (Recover at start-up, or the next prompt), so a crash or a
// shutdown loses none. It is safe for concurrent use.
//
// Each root session with anything live — an agent, notices awaiting a
// step's admission — is owned by one loop of the resident engine
// (internal/resident), which takes commands from a channel; nothing else
// touches its state, and nothing waits for idleness. Across replicas (see
// resident.Control), a loop holds the root's resident lease while it has
// anything live, taken before its first command runs and released once it
// holds nothing; a root another replica drives gets its prompts and
// notices there.
type Manager struct {
	cfg   ManagerConfig
	log   *slog.Logger
	roots *resident.Group[root, error]

	mu     sync.Mutex
	closed bool
}

// root is the state of one root session, owned by its loop in Manager.roots.
type root struct {
	key resident.Key

	agent    *agent.Agent
	lastUsed time.Time
	// closed: Manager.Close reached this loop; no agent loads any more.
	closed bool
	// disposed: the root was disposed (Dispose); it takes no more prompts.
	disposed bool
	// notices are the messages Notify accepted and has not handed over
	// for good, in acceptance order: a prefix steered into the running
	// turn and awaiting admission, then messages waiting for those to
	// settle; run awaits the head's admission.
	notices []*delivery
	// mayTurn: a message may be runnable in the agent's next-turn inbox,
	// so a turn other than the running one may start without the Manager giving
	// the agent a message; see followup. Cleared whenever the agent is seen
	// idle: its inbox then holds nothing runnable, and only the Manager adds to
	// it.
	mayTurn bool
	// unacked are the inbox rows handed to agent whose user/message its log
	// may not hold yet; scanned is how many of agent's events sweep read.
	unacked map[string]bool
	scanned int
}

// followup gives s's live agent msg, an accepted inbox row, as its next
// turn. mayTurn is set when msg was queued behind a running turn, and when
// notices are steered: they may belong to a turn that already ended, and
// must not be joined by later notices in the turn this followup opens.
func (s *root) followup(ctx context.Context, msg sessionlog.UserMessage) error {
	a := s.agent
	running := a.Running()
	if _, err := a.FollowupMessage(ctx, msg); err != nil {
		return err
	}
	s.handed(msg.ID)
	if running || slices.ContainsFunc(s.notices, func(d *delivery) bool { return d.steered != nil }) {
		s.mayTurn = true
	}
	return nil
}

// handed records that the agent got inbox row id, to be acknowledged once
// its log holds it (Manager.sweep).
func (s *root) handed(id string) {
	if s.unacked == nil {
		s.unacked = map[string]bool{}
	}
	s.unacked[id] = true
}

// delivery is one message Notify accepted for a root: a settlement notice or
// a child report. steered is set while it waits for a model step's
// admission.
type delivery struct {
	msg     sessionlog.UserMessage
	quiet   bool
	steered <-chan error
}

var _ children.NoticeSink = (*Manager)(nil)

// NewManager returns the Manager of root sessions for cfg.
func NewManager(cfg ManagerConfig) *Manager {
	r := &Manager{cfg: cfg, log: cfg.Logger}
	var leases *resident.Leases
	if cfg.Control != nil {
		leases = cfg.Control.Leases()
	}
	idle := func(s *root) bool { return s.agent == nil && len(s.notices) == 0 }
	r.roots = resident.NewGroup(resident.Policy[root, error]{
		Kind:   "root",
		Leases: leases,
		New: func(key resident.Key) *root {
			r.mu.Lock()
			defer r.mu.Unlock()
			return &root{key: key, closed: r.closed}
		},
		// A loop ends once its root has neither an agent nor notices; until
		// then it drives the root, under its lease.
		Idle:    idle,
		Driving: func(s *root) bool { return !idle(s) },
		Watch:   r.watch,
		Owns:    func(sess store.Session) bool { return sess.ParentID == "" },
		Resume:  r.recoverIn,
		Stop:    r.stop,
	})
	if ctl := cfg.Control; ctl != nil {
		ctl.AddResidents(r.roots)
		ctl.Handle(opPrompt, func(ctx context.Context, _ string, raw json.RawMessage) (any, error) {
			var row store.InboxMessage
			if err := json.Unmarshal(raw, &row); err != nil {
				return nil, err
			}
			return nil, r.prompt(ctx, row)
		})
		ctl.Handle(opNotify, func(ctx context.Context, parentID string, raw json.RawMessage) (any, error) {
			var a notifyArgs
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, err
			}
			return nil, r.Notify(ctx, parentID, a.Msg, a.Quiet)
		})
		r.handleTree(ctl)
		ctl.Handle(opDeliverWaiting, func(ctx context.Context, id string, _ json.RawMessage) (any, error) {
			return nil, r.DeliverWaiting(ctx, id)
		})
	}
	return r
}

// Prompt runs content as the next turn of root session sessionID's own
// agent (POST /v1/sessions/{id}/messages): it returns the message id once
// the message is a row of the durable inbox and in the agent's inbox; the
// turn runs afterwards and streams into the session log. A busy agent
// queues it as its following turn. ctx's tenant scopes the session.
//
// Returns ESessionNotFound for an unknown session, EInvalidRequest for a
// child session (children are driven through their provider), for content
// that is not JSON and for an unknown model route in the header, EDraining
// after Close, and store errors; an error means nothing was accepted.
func (r *Manager) Prompt(ctx context.Context, sessionID string, content []model.Block) (string, error) {
	msg := sessionlog.UserMessage{Content: content, Source: sessionlog.Source{Kind: subagent.SourceUser}}
	row, err := children.InboxRow(sessionID, msg)
	if err != nil {
		return "", &subagent.Error{Code: subagent.EInvalidRequest, Message: "content is not valid JSON",
			Fields: map[string]string{"content": "not valid JSON"}, Err: err}
	}
	if err := r.prompt(ctx, row); err != nil {
		return "", err
	}
	return row.ID, nil
}

// prompt is Prompt of row, on the replica that drives the root. A row
// stored already (a request retried after the replica it was sent to was
// lost) is taken as accepted.
func (r *Manager) prompt(ctx context.Context, row store.InboxMessage) error {
	sessionID := row.ChildID
	msg, err := children.RowMessage(row)
	if err != nil {
		return fmt.Errorf("prompt %s: %w", sessionID, err)
	}
	// The kind first: a refused request never reaches a loop or a lease.
	if err := r.isRoot(ctx, sessionID); err != nil {
		return err
	}
	return r.route(ctx, sessionID, opPrompt, row, func() error {
		return r.do(ctx, sessionID, true, func(s *root) error {
			if err := r.cfg.Store.Enqueue(ctx, row); err != nil && !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("accept prompt for %s: %w", sessionID, err)
			}
			// Accepted: the caller's cancellation changes nothing from here.
			base := context.WithoutCancel(ctx)
			if paused, err := r.paused(base, sessionID); err != nil || paused {
				return err // a paused tree's prompt waits in the inbox (DeliverWaiting)
			}
			if err := s.followup(base, msg); err != nil {
				r.ack(base, sessionID, row.ID) // withdrawn: the caller sees the error
				return err
			}
			r.sweep(base, sessionID, s)
			return nil
		})
	})
}

// Recover delivers, at start-up, the rows in the durable inbox of every
// root session — messages accepted before the previous process stopped:
// quiet ones at the head go to the log without waking the session (R108,
// R118), and when anything else is pending its agent is loaded, which
// delivers the rest (see load). Continuable children are left to
// children.Manager.Recover. Failures are logged per session and returned
// joined; the other sessions are still recovered.
func (r *Manager) Recover(ctx context.Context) error {
	return r.roots.Recover(ctx, r.cfg.Store, r.log)
}

// recoverIn delivers what root s's durable inbox holds, under its lease,
// unless its agent is loaded already (resident.Policy.Resume): start-up
// recovery, and the takeover of a root whose owner was lost. It runs in
// s's loop.
func (r *Manager) recoverIn(ctx context.Context, s *root) error {
	if err := r.roots.Hold(ctx, s.key); err != nil {
		return err
	}
	if s.agent != nil || s.closed {
		return nil // loaded meanwhile, or shutting down: the rows wait
	}
	return r.open(ctx, s, false)
}

// Live reports whether sessionID has a live agent in this process and
// whether a turn of it is running (activity of listings).
func (r *Manager) Live(ctx context.Context, sessionID string) (live, running bool) {
	r.roots.Peek(resident.Key{Tenant: store.Tenant(ctx), ID: sessionID}, func(s *root) {
		if s.agent != nil {
			live, running = true, s.agent.Running()
		}
	})
	return live, running
}

// Idle returns a channel closed once sessionID's live agent runs no turn
// and has nothing runnable queued (agent.Agent.Idle), and false when no
// agent of it is live here.
func (r *Manager) Idle(ctx context.Context, sessionID string) (<-chan struct{}, bool) {
	var idle <-chan struct{}
	r.roots.Peek(resident.Key{Tenant: store.Tenant(ctx), ID: sessionID}, func(s *root) {
		if s.agent != nil {
			idle = s.agent.Idle()
		}
	})
	return idle, idle != nil
}

// do runs f in the loop of sessionID, starting the loop when there is
// none, and returns f's error; EAborted, without running f, when ctx ends
// before the loop took it. With create set the loop first loads the
// agent when it has none — and gives it the inbox rows its log lacks
// (resume) — or fails with EDraining after Close; with create false,
// s.agent may be nil. After Close the agents are closed and only the log
// still takes input.
func (r *Manager) do(ctx context.Context, sessionID string, create bool, f func(s *root) error) error {
	var err error
	derr := r.roots.DoContext(ctx, resident.Key{Tenant: store.Tenant(ctx), ID: sessionID}, func(s *root) {
		if err = r.roots.Hold(ctx, s.key); err == nil {
			err = r.load(ctx, s, create, f)
		}
	})
	if derr != nil {
		return &subagent.Error{Code: subagent.EAborted, Message: "the request was aborted before the session took it", Err: derr}
	}
	return err
}

// watch is the loop's watch (resident.Policy.Watch): when the head of s's
// notices was steered, its loop takes that steer's settlement — an
// admitted notice is done, a rejected one is handed over again (pump),
// ahead of every later notice.
func (r *Manager) watch(s *root) (<-chan error, func(context.Context, *root, error)) {
	if len(s.notices) == 0 || s.notices[0].steered == nil {
		return nil, nil
	}
	return s.notices[0].steered, func(ctx context.Context, s *root, err error) {
		if err == nil {
			s.notices = s.notices[1:]
		} else {
			s.notices[0].steered = nil
		}
		if err := r.pump(ctx, s.key.ID, s, nil); err != nil {
			r.log.ErrorContext(ctx, "notice was not delivered", slog.String("session_id", s.key.ID), slog.Any("error", err))
		}
		r.sweep(ctx, s.key.ID, s)
	}
}

// load runs f for do in s's loop, loading the agent first as do says.
func (r *Manager) load(ctx context.Context, s *root, create bool, f func(s *root) error) error {
	if create && s.closed {
		return subagent.Errorf(subagent.EDraining, "the service is shutting down")
	}
	if create {
		if err := r.notDisposed(ctx, s); err != nil {
			return err
		}
	}
	if s.agent == nil && create {
		if err := r.open(ctx, s, true); err != nil {
			return err
		}
	}
	s.lastUsed = time.Now()
	return f(s)
}

// open loads s's agent and gives it the inbox rows its log lacks (resume).
// Quiet rows at the head of the inbox are appended to the log first, so
// that the agent loads with them and the next turn reads them (foldQuiet);
// when nothing else is pending and always is unset, no agent is loaded
// and nothing wakes. It runs in s's loop and s has no agent.
func (r *Manager) open(ctx context.Context, s *root, always bool) error {
	id := s.key.ID
	rows, err := r.foldQuiet(ctx, id)
	if err != nil {
		return err
	}
	if len(rows) == 0 && !always {
		return nil
	}
	a, err := r.build(ctx, id)
	if err != nil {
		return err
	}
	s.agent = a
	if err := r.resume(ctx, id, s, rows); err != nil {
		if cerr := r.closeAgent(ctx, id, s); cerr != nil {
			r.log.ErrorContext(ctx, "close root agent", slog.String("session_id", id), slog.Any("error", cerr))
		}
		return err
	}
	return nil
}

// foldQuiet appends the quiet rows at the head of root session id's
// durable inbox to its log, as a quiet Notify to a root without an agent
// does, acknowledges them, and returns the rows after them. A row the log
// holds already (a crash between append and acknowledgement) is only
// acknowledged. The log is read only when such a row is pending.
func (r *Manager) foldQuiet(ctx context.Context, id string) ([]store.InboxMessage, error) {
	rows, err := r.cfg.Store.Pending(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("root agent %s: read inbox: %w", id, err)
	}
	n := slices.IndexFunc(rows, func(row store.InboxMessage) bool { return !row.Quiet })
	if n < 0 {
		n = len(rows)
	}
	if n == 0 {
		return rows, nil
	}
	if err := r.isRoot(ctx, id); err != nil {
		return nil, err
	}
	logged, err := r.logged(ctx, id)
	if err != nil {
		return nil, err
	}
	var msgs []sessionlog.UserMessage
	var ids []string
	for _, row := range rows[:n] {
		ids = append(ids, row.ID)
		if logged[row.ID] {
			continue
		}
		msg, err := children.RowMessage(row)
		if err != nil {
			r.log.ErrorContext(ctx, "dropping an undecodable inbox message", slog.String("session_id", id), slog.Any("error", err))
			continue
		}
		msgs = append(msgs, msg)
	}
	if err := r.appendMessages(ctx, id, msgs...); err != nil {
		return nil, err
	}
	r.ack(ctx, id, ids...)
	return rows[n:], nil
}

// logged returns the ids of the user/messages root session id's log holds.
func (r *Manager) logged(ctx context.Context, id string) (map[string]bool, error) {
	ids := map[string]bool{}
	for after := int64(-1); ; {
		page, err := r.cfg.Store.Events(ctx, id, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("root agent %s: read log: %w", id, err)
		}
		if len(page) == 0 {
			return ids, nil
		}
		maps.Copy(ids, sessionlog.LoggedMessages(page))
		after = page[len(page)-1].Seq
	}
}

// build builds the agent of root session id from its header and log.
func (r *Manager) build(ctx context.Context, id string) (*agent.Agent, error) {
	hdr, err := r.cfg.Store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, subagent.Errorf(subagent.ESessionNotFound, "session %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("root agent %s: %w", id, err)
	}
	if hdr.ParentID != "" {
		return nil, subagent.Errorf(subagent.EInvalidRequest,
			"session %q is a subagent child of %q: prompt a root session, or send a child a followup", id, hdr.ParentID)
	}
	cfg := agent.Config{
		ID:                id,
		Store:             r.cfg.Store,
		Logger:            r.log,
		ModelName:         hdr.AgentModel,
		MaxTokens:         hdr.MaxTokens,
		Global:            r.cfg.Tools,
		Persona:           hdr.Persona,
		DeploymentPersona: r.cfg.DeploymentPersona,
		Vars:              r.cfg.Vars,
		Metrics:           r.cfg.Metrics,
		TurnAgent:         RootAgent,
	}
	if r.cfg.Budget != nil {
		cfg.Gate = r.cfg.Budget
	}
	if r.cfg.Routes != nil {
		rt, name, err := r.cfg.Routes.Resolve(hdr.AgentProvider, hdr.AgentModel)
		if errors.Is(err, model.ErrUnknownRoute) {
			return nil, &subagent.Error{Code: subagent.EInvalidRequest, Message: err.Error(),
				Fields: map[string]string{"agentOptions.provider": err.Error()}, Err: err}
		}
		if err != nil {
			return nil, fmt.Errorf("root agent %s: %w", id, err)
		}
		cfg.Model, cfg.ModelName, cfg.ModelProvider = rt.Model, name, rt.Kind
	}
	// The agent outlives the request that loads it: keep only its tenant,
	// and fence its writes by the root's lease.
	a, err := agent.New(r.fenced(store.WithTenant(context.Background(), store.Tenant(ctx))), cfg)
	if err != nil {
		return nil, fmt.Errorf("root agent %s: %w", id, err)
	}
	return a, nil
}

// resume delivers rows, what the durable inbox holds for s's freshly
// loaded agent after its quiet head (foldQuiet), in acceptance order, each
// as its own turn: what a crash, a shutdown or a closed agent left
// undelivered. The inbox is the authority: what the log left queued in the
// agent's own inbox is discarded first, and rows the log already holds are
// acknowledged, so that nothing runs twice.
func (r *Manager) resume(ctx context.Context, id string, s *root, rows []store.InboxMessage) error {
	a := s.agent
	a.Cancel(sessionlog.CauseDisposed, false)
	if len(rows) == 0 {
		return nil
	}
	if paused, err := r.paused(ctx, id); err != nil || paused {
		return err // the rows wait in the inbox (DeliverWaiting)
	}
	logged := sessionlog.LoggedMessages(a.Events())
	var done []string
	defer func() { r.ack(ctx, id, done...) }()
	for _, row := range rows {
		if logged[row.ID] {
			done = append(done, row.ID)
			continue
		}
		msg, err := children.RowMessage(row)
		if err != nil {
			r.log.ErrorContext(ctx, "dropping an undecodable inbox message", slog.String("session_id", id), slog.Any("error", err))
			done = append(done, row.ID)
			continue
		}
		if err := s.followup(ctx, msg); err != nil {
			return fmt.Errorf("root agent %s: deliver message %s: %w", id, row.ID, err)
		}
	}
	return nil
}

// sweep acknowledges the inbox rows handed to s's agent whose user/message
// its log now holds, reading only the events it has not read yet.
func (r *Manager) sweep(ctx context.Context, id string, s *root) {
	if s.agent == nil || len(s.unacked) == 0 {
		return
	}
	evs := s.agent.EventsFrom(s.scanned)
	s.scanned += len(evs)
	var ids []string
	for mid := range sessionlog.LoggedMessages(evs) {
		if s.unacked[mid] {
			ids = append(ids, mid)
			delete(s.unacked, mid)
		}
	}
	r.ack(ctx, id, ids...)
}

// ack removes delivered (or withdrawn) rows of session id from the durable
// inbox. A failure is logged: a delivered row left behind is recognised
// from the log when the agent is next loaded.
func (r *Manager) ack(ctx context.Context, id string, ids ...string) {
	if len(ids) == 0 {
		return
	}
	if err := r.cfg.Store.Ack(ctx, id, ids...); err != nil {
		r.log.ErrorContext(ctx, "remove delivered inbox messages", slog.String("session_id", id), slog.Any("error", err))
	}
}

// closeAgent closes s's agent and acknowledges what its log holds; rows it
// discarded unrun stay in the inbox for the next load. On a close error
// the agent stays in s.
func (r *Manager) closeAgent(ctx context.Context, id string, s *root) error {
	err := s.agent.Close(ctx)
	r.sweep(ctx, id, s)
	if err != nil {
		return err
	}
	s.agent, s.unacked, s.scanned = nil, nil, 0
	return nil
}

// Notify delivers msg — a settlement notice or a child report
// (docs/seam.md §13, §17), whose id the manager issued — to root session parentID,
// in the order Notify accepted messages for it (R110):
//
//   - a live agent running a turn gets it steered into its next step, so
//     several messages accepted together share one step (R78, R109); when
//     the turn ends before admitting it, it is delivered again, under the
//     same id, as if it arrived then, still ahead of later messages;
//   - a live idle agent gets it as a followup, which opens a turn — unless
//     quiet: a quiet message is appended to the log for the next turn to
//     read, the idle agent being closed first (it is reloaded with the log
//     at the next prompt), so nothing wakes (R108);
//   - with no live agent (never prompted, or closed idle) a waking message
//     loads the agent, which opens a turn with it; a quiet one — and any
//     after Close or for a disposed root — is appended to the log as a
//     user/message, which the next turn sees.
//
// Whether a message wakes is the sender's rule (children.Manager's notify
// for settlement notices, the report delivery for reports): Notify only
// carries it out.
//
// Notify returns once msg is a row of the durable inbox and in the agent's
// inbox, the log, or queued behind earlier messages still awaiting a
// step's admission — that is awaited in the background, so a parent in a
// long tool call never blocks the child. (A steer pending when the process
// dies is cancelled by the next load, which delivers its row again.) A
// quiet message to an agent caught between two queued turns becomes a turn
// of its own.
//
// Returns ESessionNotFound when parentID is unknown, EInvalidRequest when it
// is not a root session (its own driver delivers to it), and store errors
// — only for a message delivered at once, which is then withdrawn; a later
// failure is logged and leaves the row for the next load.
func (r *Manager) Notify(ctx context.Context, parentID string, msg sessionlog.UserMessage, quiet bool) error {
	row, err := children.InboxRow(parentID, msg)
	if err != nil {
		return fmt.Errorf("notify %s: %w", parentID, err)
	}
	row.Quiet = quiet
	msg.ID = row.ID
	n := &delivery{msg: msg, quiet: quiet}
	return r.route(ctx, parentID, opNotify, notifyArgs{msg, quiet}, func() error {
		return r.do(ctx, parentID, false, func(s *root) error {
			if err := r.cfg.Store.Enqueue(ctx, row); err != nil && !errors.Is(err, store.ErrConflict) {
				return fmt.Errorf("notify %s: %w", parentID, err)
			}
			s.notices = append(s.notices, n)
			err := r.pump(ctx, parentID, s, n)
			if err != nil {
				r.ack(ctx, parentID, row.ID)
			}
			r.sweep(ctx, parentID, s)
			return err
		})
	})
}

// pump hands s's waiting notices over in order, as far as order allows,
// and starts the goroutine that awaits steered ones. A waiting notice is
// steered into the running turn when every notice before it is steered
// into that same turn — certain when no other turn can have started since
// (mayTurn unset) — so it cannot overtake one of them that the turn
// already rejected. The head is handed over as deliver says when it
// cannot be steered. It returns the delivery error of own when own was
// handed over here; other failures are logged. A steered head is awaited
// by s's loop (watch).
func (r *Manager) pump(ctx context.Context, parentID string, s *root, own *delivery) error {
	var ownErr error
	for len(s.notices) > 0 {
		i := slices.IndexFunc(s.notices, func(n *delivery) bool { return n.steered == nil })
		if i < 0 {
			break // all steered: await the head
		}
		n, a := s.notices[i], s.agent
		running := a != nil && a.Running()
		if a != nil && !running {
			s.mayTurn = false
		}
		if running && (i == 0 || !s.mayTurn) {
			if admitted, err := a.SubmitSteer(ctx, n.msg); err == nil {
				n.steered = admitted
				s.handed(n.msg.ID)
				continue
			}
			// Rejected at once: the turn is ending.
		}
		if i > 0 {
			break // waits for the steered ones before it
		}
		unloaded := s.agent == nil
		err := r.deliver(ctx, parentID, s, n)
		s.notices = s.notices[1:]
		if unloaded && s.agent != nil {
			// Loading the agent delivered every accepted row its log
			// lacked: the notices still waiting are among them.
			s.notices = nil
		}
		switch {
		case n == own:
			ownErr = err
		case err != nil:
			r.log.ErrorContext(ctx, "notice was not delivered", slog.String("session_id", parentID),
				slog.String("message_id", n.msg.ID), slog.Any("error", err))
		}
	}
	return ownErr
}

// deliver hands n, the head of s's notices, over without steering (see
// Notify).
func (r *Manager) deliver(ctx context.Context, parentID string, s *root, n *delivery) error {
	a := s.agent
	if a != nil && (!n.quiet || a.Running()) {
		return s.followup(ctx, n.msg)
	}
	if a == nil && !n.quiet && !s.closed && r.notDisposed(ctx, s) == nil {
		// Loading the agent gives it the inbox rows its log lacks, n's
		// among them, each as a turn: n opens one (R78). An agent that
		// cannot be loaded still gets n in its log, below.
		err := r.open(ctx, s, true)
		if err == nil {
			return nil
		}
		r.log.WarnContext(ctx, "a waking notice could not load its root's agent; it is logged for the next turn",
			slog.String("session_id", parentID), slog.Any("error", err))
	}
	if a != nil {
		// The log is about to change behind the agent's back: close it,
		// so the next prompt loads it again.
		if err := r.closeAgent(ctx, parentID, s); err != nil {
			return fmt.Errorf("notify %s: close idle agent: %w", parentID, err)
		}
	}
	if err := r.appendNotice(ctx, parentID, n.msg); err != nil {
		return err
	}
	r.ack(ctx, parentID, n.msg.ID)
	return nil
}

// appendNotice writes a notice to the log of a root session without a live
// agent. Callers run in its loop, so no agent loads meanwhile. Returns
// ESessionNotFound, EInvalidRequest for a session that is not a root, and
// store errors.
func (r *Manager) appendNotice(ctx context.Context, parentID string, msg sessionlog.UserMessage) error {
	if err := r.isRoot(ctx, parentID); err != nil {
		return err
	}
	return r.appendMessages(ctx, parentID, msg)
}

// isRoot returns ESessionNotFound unless id is a session, EInvalidRequest
// unless it is a root session, or the store's error.
func (r *Manager) isRoot(ctx context.Context, id string) error {
	hdr, err := r.cfg.Store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return subagent.Errorf(subagent.ESessionNotFound, "session %q not found", id)
	}
	if err != nil {
		return fmt.Errorf("read session %s: %w", id, err)
	}
	if hdr.ParentID != "" {
		return subagent.Errorf(subagent.EInvalidRequest, "session %q is not a root session", id)
	}
	return nil
}

// appendMessages appends msgs, in order, to root session parentID's log as
// user/messages; none is a no-op.
func (r *Manager) appendMessages(ctx context.Context, parentID string, msgs ...sessionlog.UserMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	evs := make([]store.NewEvent, len(msgs))
	for i, msg := range msgs {
		if msg.Content == nil {
			msg.Content = []model.Block{}
		}
		data, err := json.Marshal(msg)
		if err != nil {
			return fmt.Errorf("notify %s: %w", parentID, err)
		}
		evs[i] = store.NewEvent{Type: sessionlog.EventUserMessage, Data: data}
	}
	if _, err := r.cfg.Store.AppendEvents(r.fenced(ctx), parentID, evs...); err != nil {
		return fmt.Errorf("notify %s: %w", parentID, err)
	}
	return nil
}

// CloseIdle closes every live root agent that runs no turn, awaits no
// notice's admission and was last used at or before cutoff; its session can
// be prompted again later (it is re-created from its log). It returns how
// many were closed and the joined close errors. cmd/api calls it
// periodically.
func (r *Manager) CloseIdle(ctx context.Context, cutoff time.Time) (int, error) {
	n := 0
	var errs []error
	r.roots.Each(func(s *root) {
		if s.agent == nil || len(s.notices) > 0 || s.agent.Running() || s.lastUsed.After(cutoff) {
			return
		}
		if err := r.closeAgent(store.WithTenant(ctx, s.key.Tenant), s.key.ID, s); err != nil {
			errs = append(errs, err)
			return
		}
		n++
	})
	return n, errors.Join(errs...)
}

// Close stops accepting prompts (EDraining), closes every live root agent —
// a running turn ends aborted with cause disposed; what it had queued stays
// in the durable inbox for the next start — and waits until every loop has
// ended, its pending notices delivered to the log; later notices go to the
// log too. Returns ctx's error when it ends first and the joined close
// errors.
func (r *Manager) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	var errs []error
	// Closing an agent rejects its pending steers, whose notices then go
	// to the log.
	r.roots.Each(func(s *root) {
		s.closed = true
		if s.agent == nil {
			return
		}
		if err := r.closeAgent(store.WithTenant(ctx, s.key.Tenant), s.key.ID, s); err != nil {
			errs = append(errs, err)
		}
		s.agent = nil
	})
	if err := r.roots.Wait(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
