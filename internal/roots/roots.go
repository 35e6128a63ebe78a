// Package roots is the root-session kind of resident agent — the sessions
// a client creates, which have no parent. Sessions holds their rules: how
// one is created (its model route and its cwd, which must lie inside the
// workspace roots) and when one counts as working; the HTTP API and the
// MCP face create and list roots through it. The Manager runs their
// agents: prompts, notices and reports through the durable inbox, one loop
// of the resident engine (internal/resident) per root under its lease,
// stopping and disposing a root's turn (tree.go).
package roots

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// EUnknownRoute is the code of an agentOptions.provider that names no
// configured model route.
const EUnknownRoute = "UNKNOWN_ROUTE"

// Agents is what Sessions needs of the agents of root sessions;
// *Manager implements it.
type Agents interface {
	// Live reports whether the session's agent is loaded here and whether
	// it runs a turn.
	Live(ctx context.Context, sessionID string) (live, running bool)
}

// Config configures Sessions. Store is required.
type Config struct {
	Store store.Store
	// Routes are the model routes of in-process agents: Create refuses an
	// agentOptions.provider that is none of them. nil checks no route.
	Routes *model.Routes
	// WorkspaceRoots, when set, bound the cwd of a root session: it must be
	// an existing directory inside one of them (the cwd children inherit,
	// and ACP agents run in). Empty accepts any absolute path.
	WorkspaceRoots []string
	// Agents are this process's root agents, whose running turns count as
	// activity; nil means none run here.
	Agents Agents
	// Policies store a root's approvals policy; *governance.Approvals
	// implements it. nil refuses a root with one.
	Policies Policies
	// Limits tell the limits in force at a session; *governance.Limits
	// implements it. nil shows none.
	Limits Limits
}

// Policies is what Sessions needs of a root's approvals policy.
type Policies interface {
	// CreatePolicy validates p and stores it for root session rootID.
	CreatePolicy(ctx context.Context, rootID string, p governance.PolicyParams) error
	// RootPolicy returns the policy of root session rootID's tree, nil
	// when it has none.
	RootPolicy(ctx context.Context, rootID string) (*store.TreePolicy, error)
}

// Limits is what Sessions needs of a tree's limits.
type Limits interface {
	// InForce returns the limits in force at session sess.
	InForce(ctx context.Context, sess store.Session) (store.Limits, error)
}

// View is a session as its reader sees it (GET /v1/sessions/{id}).
type View struct {
	Session store.Session
	// Running is the session's activity (Activity).
	Running bool
	// Limits are the limits in force at the session; nil without
	// Config.Limits.
	Limits *store.Limits
	// Approvals is a root's approvals policy, with the always rules its
	// tree's decisions added; nil for a child, a root without one, or
	// without Config.Policies.
	Approvals *store.TreePolicy
}

// Get returns session id as its reader sees it. Returns store.ErrNotFound
// for an unknown session.
func (s *Sessions) Get(ctx context.Context, id string) (View, error) {
	hdr, err := s.cfg.Store.GetSession(ctx, id)
	if err != nil {
		return View{}, err
	}
	working, err := s.Activity(ctx, []store.Session{hdr})
	if err != nil {
		return View{}, err
	}
	v := View{Session: hdr, Running: working[hdr.ID]}
	if s.cfg.Limits != nil {
		l, err := s.cfg.Limits.InForce(ctx, hdr)
		if err != nil {
			return View{}, err
		}
		v.Limits = &l
	}
	if s.cfg.Policies != nil && hdr.ParentID == "" {
		if v.Approvals, err = s.cfg.Policies.RootPolicy(ctx, hdr.ID); err != nil {
			return View{}, err
		}
	}
	return v, nil
}

// Sessions creates root sessions and reports which sessions are working.
// It is safe for concurrent use.
type Sessions struct {
	cfg Config
}

// New returns Sessions for cfg.
func New(cfg Config) *Sessions { return &Sessions{cfg: cfg} }

// CreateParams describe a root session to create.
type CreateParams struct {
	// ID is the new session's id.
	ID    string
	Label string
	// Cwd is an absolute path, or "" for none.
	Cwd string
	// Agent is the session's model route and limits; nil is the default
	// route.
	Agent   *subagent.AgentOptions
	Persona *string
	// Approvals, when set, is the approvals policy of the session's tree:
	// it narrows the policy of every provider in the tree.
	Approvals *governance.PolicyParams
	// Limits are the tree's limits (subagent.Limits.Resolve); nil sets
	// none.
	Limits *subagent.Limits
}

// Create creates the root session p describes and returns its header as
// stored. A model route that is not configured is EUnknownRoute now rather
// than a failed turn later; a cwd outside the workspace roots is
// EInvalidRequest (see CheckCwd), and so is an invalid approvals policy
// (naming its fields). An id that exists is store.ErrConflict.
func (s *Sessions) Create(ctx context.Context, p CreateParams) (store.Session, error) {
	opts := p.Agent
	if opts == nil {
		opts = &subagent.AgentOptions{}
	}
	if err := s.checkRoute(opts.Provider); err != nil {
		return store.Session{}, err
	}
	cwd, err := CheckCwd(p.Cwd, s.cfg.WorkspaceRoots)
	if err != nil {
		return store.Session{}, err
	}
	created := time.Now()
	var limits store.Limits
	if p.Limits != nil {
		if limits, err = p.Limits.Resolve(created); err != nil {
			return store.Session{}, err
		}
	}
	if p.Approvals != nil {
		if s.cfg.Policies == nil {
			return store.Session{}, subagent.Errorf(subagent.EInvalidRequest, "this server takes no approvals")
		}
		// The policy is stored first: no tree ever runs without the policy
		// its root was created with.
		if err := s.cfg.Policies.CreatePolicy(ctx, p.ID, *p.Approvals); err != nil {
			return store.Session{}, err
		}
	}
	hdr := store.Session{
		ID:            p.ID,
		Cwd:           cwd,
		Label:         p.Label,
		AgentProvider: opts.Provider,
		AgentModel:    opts.Model,
		MaxTokens:     opts.MaxTokens,
		Persona:       p.Persona,
		Limits:        limits,
		CreatedAt:     created,
	}
	if err := s.cfg.Store.CreateSession(ctx, hdr); err != nil {
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}
	stored, err := s.cfg.Store.GetSession(ctx, p.ID)
	if err != nil {
		return store.Session{}, fmt.Errorf("read created session %s: %w", p.ID, err)
	}
	return stored, nil
}

// checkRoute returns EUnknownRoute when name is set and is not a
// configured model route; without Config.Routes nothing is checked.
func (s *Sessions) checkRoute(name string) error {
	routes := s.cfg.Routes
	if name == "" || routes == nil {
		return nil
	}
	_, _, err := routes.Resolve(name, "")
	if errors.Is(err, model.ErrUnknownRoute) {
		msg := fmt.Sprintf("unknown model route %q; configured: %s", name, strings.Join(routes.Names(), ", "))
		return &subagent.Error{Code: EUnknownRoute, Message: msg, Fields: map[string]string{"agentOptions.provider": msg}, Err: err}
	}
	if err != nil {
		return fmt.Errorf("resolve model route %q: %w", name, err)
	}
	return nil
}

// CheckCwd refuses a root session cwd outside workspaces (EInvalidRequest
// naming the field), so that no child, and no ACP agent, ever runs outside
// them, and returns the cwd to store: the path with its symlinks resolved,
// the one that was checked (a "root/link/.." whose link leads elsewhere
// resolves there, not to root). Containment is first checked on the
// cleaned path before the filesystem is looked at, and every refusal has
// the same words, so that the answer tells a client nothing about paths
// outside the roots. No workspaces, or no cwd, accepts cwd as it is.
func CheckCwd(cwd string, workspaces []string) (string, error) {
	if cwd == "" || len(workspaces) == 0 {
		return cwd, nil
	}
	clean := filepath.Clean(cwd)
	inside := slices.ContainsFunc(workspaces, func(root string) bool {
		rel, err := filepath.Rel(root, clean)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	})
	if inside {
		if real, err := config.ResolveWorkdir(cwd, workspaces); err == nil {
			return real, nil
		}
	}
	const msg = "must be an existing directory inside the workspace roots"
	return "", &subagent.Error{Code: subagent.EInvalidRequest, Message: "cwd " + msg, Fields: map[string]string{"cwd": msg}}
}

// Activity reports, for a page of sessions, which are working, whichever
// replica drives them: a root session whose agent runs a turn (here, or
// on the replica holding its lease: store.Driving), or a running child
// (subagent.Running) — one store query each for the page's roots and
// children.
func (s *Sessions) Activity(ctx context.Context, rows []store.Session) (map[string]bool, error) {
	working := map[string]bool{}
	var roots, children []string
	for _, row := range rows {
		switch {
		case row.ParentID != "":
			children = append(children, row.ID)
		case s.cfg.Agents != nil:
			if _, running := s.cfg.Agents.Live(ctx, row.ID); running {
				working[row.ID] = true
			} else {
				roots = append(roots, row.ID)
			}
		}
	}
	running, err := subagent.Running(ctx, s.cfg.Store, children...)
	if err != nil {
		return nil, err
	}
	maps.Copy(working, running)
	if len(roots) > 0 {
		driven, err := s.cfg.Store.Driving(ctx, roots, time.Now())
		if err != nil {
			return nil, fmt.Errorf("read the activity of %d root sessions: %w", len(roots), err)
		}
		maps.Copy(working, driven)
	}
	return working, nil
}
