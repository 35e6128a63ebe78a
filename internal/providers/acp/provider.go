// Package acp is the ACP provider (docs/seam.md §2): it runs a configured
// external agent that speaks the Agent Client Protocol over stdio. A
// one-shot child is one process (in its own process group) with one ACP
// session and one prompt; a continuable child (continuable.go), offered when
// the agent can resume sessions, keeps one ACP session across activations
// and restarts. The child's progress is written to a child session in the
// store so that streams and the dashboard show it live.
//
// Only the configured command ever runs, with an allowlisted environment
// (childEnv) and a working directory inside the workspace roots; nothing in
// a request can change what is executed. No agent outlives the service
// process (orphans.go).
package acp

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync"

	sdk "github.com/coder/acp-go-sdk"
	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Deps are the provider's collaborators.
type Deps struct {
	// Store receives the child sessions and their logs.
	Store turnlog.Store
	// Logger receives diagnostics, including the agents' stderr at debug
	// level.
	Logger *slog.Logger
	// WorkspaceRoots bound every child cwd (config.File.WorkspaceRoots).
	WorkspaceRoots []string
	// SecretEnv names further variables that hold credentials whatever
	// their names — the model routes' apiKeyEnv: their values are redacted
	// from the diagnostics of agents (which never inherit them).
	SecretEnv []string
	// Approver takes the permission requests the policy asks a person
	// about; required when the provider's policy can ask
	// (config.ProviderConfig.MayAsk).
	Approver governance.Approver
	// Deadlines tell the deadline a child's turn is held to
	// (*governance.Limits); nil holds it to none.
	Deadlines turnlog.Deadlines
}

// Provider runs one configured ACP agent. It is safe for concurrent use.
type Provider struct {
	cfg   config.ProviderConfig
	store turnlog.Store
	log   *slog.Logger
	roots []string
	// secretEnv is Deps.SecretEnv.
	secretEnv []string
	approver  governance.Approver
	deadlines turnlog.Deadlines

	// caps is what the agent's initialize said (caps.go).
	caps caps

	// idleMu guards the agents of continuable children kept between
	// activations.
	idleMu  sync.Mutex
	idle    map[idleKey]*idleAgent
	closing bool
}

var _ subagent.Prober = (*Provider)(nil)

// New returns the provider for cfg, which config.Load has validated. The
// command is resolved now, with exec.LookPath: a bare name through the
// service's PATH, a path (config pinned relative ones to the start
// directory) as it is; the provider always runs what was found.
//
// Returns an error naming the provider when the command is not an
// executable file.
func New(cfg config.ProviderConfig, deps Deps) (*Provider, error) {
	path, err := exec.LookPath(cfg.Command)
	if err != nil {
		return nil, fmt.Errorf("ACP provider %q: command %q: %w", cfg.Name, cfg.Command, err)
	}
	cfg.Command = path
	if cfg.MayAsk() && deps.Approver == nil {
		return nil, fmt.Errorf("ACP provider %q: its permission policy asks, but this server takes no approvals", cfg.Name)
	}
	return &Provider{
		cfg:   cfg,
		store: deps.Store,
		log:   deps.Logger.With(slog.String("provider", cfg.Name)),
		roots: deps.WorkspaceRoots,

		secretEnv: deps.SecretEnv,
		approver:  deps.Approver,
		deadlines: deps.Deadlines,
		idle:      map[idleKey]*idleAgent{},
	}, nil
}

// Name is the configured provider name.
func (p *Provider) Name() string { return p.cfg.Name }

// Description names the agent program, never its arguments or environment.
func (p *Provider) Description() string {
	return fmt.Sprintf("External ACP agent %q: works in its own context and sees only the prompt it is given",
		filepath.Base(p.cfg.Command))
}

// Capabilities has no start-time feature: the service cannot enforce an
// output schema, a depth limit, a tool filter or a persona on an external
// agent. Steer is false (ACP has no confirmed mid-turn admission) and Local
// false (the agent runs its own model); Resume is what the agent advertised
// (CanResume).
func (p *Provider) Capabilities() subagent.Capabilities {
	return subagent.Capabilities{Resume: p.CanResume()}
}

// InheritsParentContext is false: the agent sees only its prompt.
func (p *Provider) InheritsParentContext() bool { return false }

// ignore is the handler of a probe: it takes no session.
type ignore struct{}

func (ignore) sessionUpdate(sdk.SessionNotification) {}

func (ignore) requestPermission(sdk.RequestPermissionRequest) sdk.RequestPermissionResponse {
	return permissionCancelled()
}

// permissionCancelled is the answer to a permission request when no turn
// is there to take it (the turn was cancelled or stopped).
func permissionCancelled() sdk.RequestPermissionResponse {
	return sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{
		Cancelled: &sdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}}}
}

// Start spawns the agent, performs initialize and session/new, creates the
// child session, sends the prompt and returns the run (R12). ctx bounds only
// the setup: done before Start, nothing is spawned (R21); done during the
// handshake, the process group is reaped and nothing is published (R22).
//
// Returns an EAborted *subagent.Error when ctx ended first, an
// EInvalidRequest one when there is no usable working directory, an
// EAgentUnavailable one naming the reason when the agent cannot be started
// or fails the handshake, and other errors (internal) when the child log
// cannot be written.
func (p *Provider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	if ctx.Err() != nil {
		return nil, errAborted()
	}
	cwd, err := p.workdir(req.Parent.Session.Cwd)
	if err != nil {
		return nil, err
	}
	descriptor, err := subagent.SnapshotDescriptor(req.Descriptor)
	if err != nil {
		return nil, err
	}
	childID := uuid.NewString()
	r := newRun(ctx, p, childID)
	r.live, err = p.launch(ctx, cwd, r, r.Log)
	if err != nil {
		return nil, err
	}
	prompt := turnlog.TextOnly(req.Prompt)
	r.sessionID, err = r.live.newSession(ctx, cwd)
	// The log opens after the handshake, so a start that fails earlier
	// leaves nothing in the store.
	if err == nil {
		err = r.OpenLog(p.childSession(childID, cwd, req), prompt, descriptor)
	}
	if err != nil {
		r.live.discard()
		if ctx.Err() != nil {
			return nil, errAborted()
		}
		return nil, err
	}
	r.Publish(ctx, p.deadlines, func() { r.drive(prompt) })
	return r, nil
}

// errAborted is the start failure when the request ended before the child
// was published.
func errAborted() error {
	return subagent.Errorf(subagent.EAborted, "subagent request was aborted before the ACP child started")
}

// workdir is the configured cwd, else the parent's, checked again at every
// start because directories come and go.
func (p *Provider) workdir(parentCwd string) (string, error) {
	dir, from := p.cfg.Cwd, "configured cwd"
	if dir == "" {
		if parentCwd == "" {
			return "", subagent.Errorf(subagent.EInvalidRequest,
				"subagent-acp: no working directory for the child — the parent session has no cwd and provider %q configures none", p.cfg.Name)
		}
		dir, from = parentCwd, "parent session's cwd"
	}
	real, err := config.ResolveWorkdir(dir, p.roots)
	if err != nil {
		return "", subagent.Errorf(subagent.EInvalidRequest,
			"subagent-acp: the %s cannot be the child's working directory: %v", from, err)
	}
	return real, nil
}

// childSession is the header of one-shot child id, in cwd.
func (p *Provider) childSession(id, cwd string, req subagent.ResolvedRequest) store.Session {
	return turnlog.Session(id, p.cfg.Name, cwd, req)
}
