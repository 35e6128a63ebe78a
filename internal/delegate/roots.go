package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// SourceUser is the source kind of a client's prompt (seam-spec §1.19).
const SourceUser = "user"

// RootsConfig configures Roots.
type RootsConfig struct {
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
}

// Roots runs the agents of root sessions: one live *agent.Agent per root
// session, created on demand from the session header and its log, so that an
// agent closed while idle (CloseIdle) continues where its log ends. It also
// delivers settlement notices to root parents (Notify). It is safe for
// concurrent use.
type Roots struct {
	cfg RootsConfig
	log *slog.Logger

	mu     sync.Mutex
	closed bool
	roots  map[rootKey]*root
	// steers tracks notice deliveries still waiting for a busy agent's next
	// step, so Close can wait for them.
	steers sync.WaitGroup
}

// rootKey identifies a root session across tenants.
type rootKey struct{ tenant, id string }

// root is the slot of one root session. mu serialises creating, closing and
// delivering to its agent; dead marks a slot CloseIdle removed, which
// callers that still hold it must not use.
type root struct {
	mu       sync.Mutex
	agent    *agent.Agent
	lastUsed time.Time
	dead     bool
}

var _ subagent.NoticeSink = (*Roots)(nil)

// NewRoots returns Roots for cfg.
func NewRoots(cfg RootsConfig) *Roots {
	return &Roots{cfg: cfg, log: cfg.Logger, roots: map[rootKey]*root{}}
}

// Prompt runs content as the next turn of root session sessionID's own
// agent (POST /v1/sessions/{id}/messages): it returns the message id once
// the message is durably in the agent's inbox; the turn runs afterwards and
// streams into the session log. A busy agent queues it as its following
// turn. ctx's tenant scopes the session.
//
// Returns ESessionNotFound for an unknown session, EInvalidRequest for a
// child session (children are driven through their provider) and for an
// unknown model route in the header, EDraining after Close, and store
// errors.
func (r *Roots) Prompt(ctx context.Context, sessionID string, content []model.Block) (string, error) {
	var id string
	err := r.with(ctx, sessionID, true, func(a *agent.Agent) error {
		var err error
		id, err = a.Followup(ctx, content, agent.Source{Kind: SourceUser})
		return err
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Live reports whether sessionID has a live agent in this process and
// whether a turn of it is running (activity of listings).
func (r *Roots) Live(ctx context.Context, sessionID string) (live, running bool) {
	r.mu.Lock()
	s := r.roots[rootKey{store.Tenant(ctx), sessionID}]
	r.mu.Unlock()
	if s == nil {
		return false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agent == nil || s.dead {
		return false, false
	}
	return true, s.agent.Running()
}

// with runs f on the live agent of sessionID under its slot lock, loading
// the agent first when create is true. With create false and no live agent,
// f gets nil; after Close it always gets nil (the agents are closing, and
// only the log still takes input), and create fails with EDraining.
func (r *Roots) with(ctx context.Context, sessionID string, create bool, f func(a *agent.Agent) error) error {
	key := rootKey{store.Tenant(ctx), sessionID}
	for {
		r.mu.Lock()
		closed := r.closed
		if closed && create {
			r.mu.Unlock()
			return subagent.Errorf(subagent.EDraining, "the service is shutting down")
		}
		s := r.roots[key]
		if s == nil {
			s = &root{}
			r.roots[key] = s
		}
		r.mu.Unlock()

		s.mu.Lock()
		if closed {
			defer s.mu.Unlock()
			return f(nil)
		}
		if s.dead {
			s.mu.Unlock()
			continue // CloseIdle removed it meanwhile; take the new slot
		}
		err := func() error {
			defer s.mu.Unlock()
			if s.agent == nil && create {
				a, err := r.load(ctx, sessionID)
				if err != nil {
					return err
				}
				s.agent = a
			}
			s.lastUsed = time.Now()
			return f(s.agent)
		}()
		return err
	}
}

// load builds the agent of root session id from its header and log.
func (r *Roots) load(ctx context.Context, id string) (*agent.Agent, error) {
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
		cfg.Model, cfg.ModelName = rt.Model, name
	}
	// The agent outlives the request that loads it: keep only its tenant.
	a, err := agent.New(store.WithTenant(context.Background(), store.Tenant(ctx)), cfg)
	if err != nil {
		return nil, fmt.Errorf("root agent %s: %w", id, err)
	}
	return a, nil
}

// Notify delivers a settlement notice (seam-spec §2.10, R77–R78) to root
// session parentID: a live idle agent gets it as a followup, which opens a
// turn; a live busy agent gets it steered into its next step (several
// simultaneous notices share one step), and as a followup when the turn ends
// before admitting it; with no live agent the notice is appended to the log
// as a user/message, which the next turn sees. Notify returns once the
// notice is in the agent's inbox or the log — admission of a steer is
// awaited in the background, so a parent in a long tool call never blocks
// the child's settlement. (A steer still pending when the process dies is
// cancelled by the next load, like every pending steer.)
//
// Returns ESessionNotFound when parentID is unknown, EInvalidRequest when it
// is not a root session (its own driver delivers to it), and store errors.
func (r *Roots) Notify(ctx context.Context, parentID string, content []model.Block, src agent.Source) error {
	msg := agent.UserMessage{ID: uuid.NewString(), Role: "user", Content: content, Source: src}
	return r.with(ctx, parentID, false, func(a *agent.Agent) error {
		if a == nil {
			return r.appendNotice(ctx, parentID, msg)
		}
		if a.Running() {
			admitted, err := a.SubmitSteer(ctx, msg)
			if err == nil {
				r.steers.Add(1)
				go r.awaitSteer(store.WithTenant(context.Background(), store.Tenant(ctx)), parentID, msg, admitted)
				return nil
			}
			if !errors.Is(err, agent.ErrSteerRejected) {
				return fmt.Errorf("notify %s: %w", parentID, err)
			}
		}
		_, err := a.FollowupMessage(ctx, msg)
		return err
	})
}

// awaitSteer waits for a steered notice's admission; when the turn ended
// first, the notice is delivered again, under the same id, as Notify would
// deliver it now.
func (r *Roots) awaitSteer(ctx context.Context, parentID string, msg agent.UserMessage, admitted <-chan error) {
	defer r.steers.Done()
	if err := <-admitted; err == nil {
		return
	}
	err := r.with(ctx, parentID, false, func(a *agent.Agent) error {
		if a == nil {
			return r.appendNotice(ctx, parentID, msg)
		}
		_, err := a.FollowupMessage(ctx, msg)
		return err
	})
	if err != nil {
		r.log.ErrorContext(ctx, "settlement notice was not delivered", slog.String("session_id", parentID), slog.Any("error", err))
	}
}

// appendNotice writes a notice to the log of a root session without a live
// agent. Callers hold its slot lock, so no agent loads meanwhile.
func (r *Roots) appendNotice(ctx context.Context, parentID string, msg agent.UserMessage) error {
	hdr, err := r.cfg.Store.GetSession(ctx, parentID)
	if errors.Is(err, store.ErrNotFound) {
		return subagent.Errorf(subagent.ESessionNotFound, "session %q not found", parentID)
	}
	if err != nil {
		return fmt.Errorf("notify %s: %w", parentID, err)
	}
	if hdr.ParentID != "" {
		return subagent.Errorf(subagent.EInvalidRequest, "session %q is not a root session", parentID)
	}
	if msg.Content == nil {
		msg.Content = []model.Block{}
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("notify %s: %w", parentID, err)
	}
	if _, err := r.cfg.Store.AppendEvents(ctx, parentID, store.NewEvent{Type: agent.EventUserMessage, Data: data}); err != nil {
		return fmt.Errorf("notify %s: %w", parentID, err)
	}
	return nil
}

// CloseIdle closes every live root agent that runs no turn and was last
// used at or before cutoff; its session can be prompted again later (it is
// re-created from its log). It returns how many were closed and the joined
// close errors. cmd/api calls it periodically.
func (r *Roots) CloseIdle(ctx context.Context, cutoff time.Time) (int, error) {
	r.mu.Lock()
	slots := make(map[rootKey]*root, len(r.roots))
	for k, s := range r.roots {
		slots[k] = s
	}
	r.mu.Unlock()
	n := 0
	var errs []error
	for k, s := range slots {
		s.mu.Lock()
		if s.dead || (s.agent != nil && (s.agent.Running() || s.lastUsed.After(cutoff))) {
			s.mu.Unlock()
			continue
		}
		if s.agent != nil {
			if err := s.agent.Close(ctx); err != nil {
				errs = append(errs, err)
				s.mu.Unlock()
				continue
			}
			n++
		}
		s.agent, s.dead = nil, true
		s.mu.Unlock()
		r.mu.Lock()
		if r.roots[k] == s {
			delete(r.roots, k)
		}
		r.mu.Unlock()
	}
	return n, errors.Join(errs...)
}

// Close stops accepting prompts and notices (EDraining), closes every live
// root agent — a running turn ends aborted with cause disposed — and waits
// for pending notice deliveries. Returns ctx's error when it ends first and
// the joined close errors.
func (r *Roots) Close(ctx context.Context) error {
	var errs []error
	// Closing an agent rejects its pending steers, whose fallback then
	// appends the notice to the log.
	r.mu.Lock()
	r.closed = true
	slots := make([]*root, 0, len(r.roots))
	for _, s := range r.roots {
		slots = append(slots, s)
	}
	r.mu.Unlock()
	for _, s := range slots {
		s.mu.Lock()
		if s.agent != nil {
			if err := s.agent.Close(ctx); err != nil {
				errs = append(errs, err)
			}
			s.agent = nil
		}
		s.dead = true
		s.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { r.steers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}
