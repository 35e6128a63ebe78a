// Package a2a is the A2A provider (docs/seam.md §2): a remote agent that
// speaks A2A v1 (github.com/a2aproject/a2a-go) as a child. A one-shot child
// is one message in a new context — message/stream, or message/send and
// tasks/get polling when the agent's card says it cannot stream — and a
// continuable child is one context across turns (continuable.go). The
// remote tasks' text, status and end are journaled into the child's
// session log in the event types every child writes, so that replays,
// streams, the dashboard and the run's result work as for any child.
//
// Every call — the card fetch included — carries the configured bearer
// token and the caller's traceparent, and dials through the outbound guard
// (internal/netguard): loopback, private and link-local addresses need
// Deps.AllowPrivate.
package a2a

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Deps are the provider's collaborators and settings.
type Deps struct {
	// Store receives the child sessions and their logs.
	Store turnlog.Store
	// Logger receives diagnostics.
	Logger *slog.Logger
	// AllowPrivate lets the provider reach loopback, private and
	// link-local addresses (SUBAGENTD_A2A_ALLOW_PRIVATE).
	AllowPrivate bool
	// PollInterval is how often a task of an agent that cannot stream is
	// read with tasks/get; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// Deadlines tell the deadline a child's turn is held to
	// (*governance.Limits); nil holds it to none.
	Deadlines turnlog.Deadlines
	// Approver takes the questions of the remote agent's input-required
	// tasks to a person (input.go); nil fails such a task's turn.
	Approver governance.Approver
}

// DefaultPollInterval is the tasks/get period for agents that cannot
// stream.
const DefaultPollInterval = time.Second

// Provider is one configured remote A2A agent. Safe for concurrent use.
type Provider struct {
	cfg   config.ProviderConfig
	store turnlog.Store
	log   *slog.Logger
	hc    *http.Client
	poll  time.Duration
	host  string
	// deadlines is Deps.Deadlines; approver Deps.Approver.
	deadlines turnlog.Deadlines
	approver  governance.Approver

	// mu guards conn, the client made from the agent's card once it was
	// fetched, the last failure to fetch it, and the fetch under way
	// (closed when it ended).
	mu       sync.Mutex
	conn     *conn
	failed   error
	failedAt time.Time
	fetching chan struct{}
}

var _ subagent.Prober = (*Provider)(nil)

// conn is a client of the remote agent, made from its card.
type conn struct {
	client *a2aclient.Client
	// streaming is the card's capabilities.streaming.
	streaming bool
}

// New returns the provider of cfg, which config.Load has validated. It
// reads the bearer token from cfg.BearerEnv now.
//
// Returns an error naming the provider when the token's variable is unset
// or empty, or when the card URL names a loopback, private or link-local
// host and deps.AllowPrivate is false.
func New(cfg config.ProviderConfig, deps Deps) (*Provider, error) {
	var token string
	if cfg.BearerEnv != "" {
		if token = os.Getenv(cfg.BearerEnv); token == "" {
			return nil, fmt.Errorf("A2A provider %q: auth.bearerEnv %s is unset or empty", cfg.Name, cfg.BearerEnv)
		}
	}
	if err := checkURL(cfg.URL, deps.AllowPrivate); err != nil {
		return nil, fmt.Errorf("A2A provider %q: %w", cfg.Name, err)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("A2A provider %q: card URL: %w", cfg.Name, err)
	}
	poll := deps.PollInterval
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	return &Provider{
		cfg: cfg, store: deps.Store, log: deps.Logger.With(slog.String("provider", cfg.Name)),
		hc: newHTTPClient(deps.AllowPrivate, token), poll: poll, host: u.Host, deadlines: deps.Deadlines, approver: deps.Approver,
	}, nil
}

// Name is the configured provider name.
func (p *Provider) Name() string { return p.cfg.Name }

// Description names the agent's host, never its path or credentials.
func (p *Provider) Description() string {
	return fmt.Sprintf("Remote A2A agent at %s: works in its own context and sees only the prompt it is given", p.host)
}

// Capabilities has no start-time feature: the service cannot enforce an
// output schema, a depth limit, a tool filter or a persona on a remote
// agent. Steer is false (A2A has no confirmed mid-turn admission) and
// Local false; Resume is true: an A2A context is a conversation that any
// later message continues (continuable.go).
func (p *Provider) Capabilities() subagent.Capabilities { return subagent.Capabilities{Resume: true} }

// InheritsParentContext is false: the agent sees only its prompt.
func (p *Provider) InheritsParentContext() bool { return false }

// WaitProbe fetches the agent's card unless it was (connect): nil once
// the provider reaches its agent, else why it cannot, which /readyz
// lists. Its capabilities do not depend on the card.
func (p *Provider) WaitProbe(ctx context.Context) error {
	_, err := p.connect(ctx)
	return err
}

// cardTimeout bounds the card fetch; cardRetry is how long a failed fetch
// is the answer before the card is fetched again, so that readiness
// probes and runs do not hammer an agent that is down.
const (
	cardTimeout = 30 * time.Second
	cardRetry   = 5 * time.Second
)

// connect returns the client of the agent, fetching its card the first
// time (again cardRetry after a failure); concurrent callers wait for the
// one fetch under way, or for their ctx. Returns an EAgentUnavailable
// *subagent.Error naming the reason when the card cannot be fetched or
// offers no transport this client speaks, or when ctx ended first.
func (p *Provider) connect(ctx context.Context) (*conn, error) {
	for {
		p.mu.Lock()
		switch {
		case p.conn != nil:
			c := p.conn
			p.mu.Unlock()
			return c, nil
		case p.failed != nil && time.Since(p.failedAt) < cardRetry:
			err := p.failed
			p.mu.Unlock()
			return nil, err
		case p.fetching != nil:
			fetching := p.fetching
			p.mu.Unlock()
			select {
			case <-fetching:
				continue
			case <-ctx.Done():
				return nil, subagent.Errorf(subagent.EAgentUnavailable, "A2A provider %q: its agent card is still being fetched: %v", p.cfg.Name, ctx.Err())
			}
		}
		done := make(chan struct{})
		p.fetching = done
		p.mu.Unlock()
		c, err := p.fetchCard(ctx)
		p.mu.Lock()
		p.fetching = nil
		close(done)
		switch {
		case err == nil:
			p.conn, p.failed = c, nil
		case ctx.Err() == nil:
			// A caller that gave up says nothing about the agent.
			p.failed, p.failedAt = err, time.Now()
		}
		p.mu.Unlock()
		return c, err
	}
}

// fetchCard fetches the agent's card and makes a client from it.
func (p *Provider) fetchCard(ctx context.Context) (*conn, error) {
	cctx, cancel := context.WithTimeout(ctx, cardTimeout)
	defer cancel()
	card, err := agentcard.NewResolver(p.hc).Resolve(cctx, p.cfg.URL, agentcard.WithPath(""))
	if err != nil {
		return nil, subagent.Errorf(subagent.EAgentUnavailable, "A2A provider %q: fetch the agent card: %v", p.cfg.Name, err)
	}
	client, err := a2aclient.NewFromCard(cctx, card,
		a2aclient.WithJSONRPCTransport(p.hc), a2aclient.WithRESTTransport(p.hc),
		a2aclient.WithConfig(a2aclient.Config{DisableTenantPropagation: true}))
	if err != nil {
		return nil, subagent.Errorf(subagent.EAgentUnavailable, "A2A provider %q: the agent card offers no usable interface: %v", p.cfg.Name, err)
	}
	return &conn{client: client, streaming: card.Capabilities.Streaming}, nil
}

// Start fetches the agent's card if it has not yet, creates the child
// session with its first turn open and sends the prompt as a message in a
// new context; the run follows the remote task (run.go). ctx bounds only
// the setup: done before the child is published, nothing is (R21, R22).
//
// Returns an EAborted *subagent.Error when ctx ended first, an
// EAgentUnavailable one when the agent's card cannot be had, and other
// errors (internal) when the child log cannot be written.
func (p *Provider) Start(ctx context.Context, req subagent.ResolvedRequest) (subagent.Run, error) {
	if ctx.Err() != nil {
		return nil, errAborted()
	}
	c, err := p.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errAborted()
		}
		return nil, err
	}
	descriptor, err := subagent.SnapshotDescriptor(req.Descriptor)
	if err != nil {
		return nil, err
	}
	childID := uuid.NewString()
	r := newRun(ctx, p, c, childID)
	prompt := turnlog.TextOnly(req.Prompt)
	if err := r.OpenLog(p.childSession(childID, req), prompt, descriptor); err != nil {
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
	return subagent.Errorf(subagent.EAborted, "subagent request was aborted before the A2A child started")
}

// childSession is the header of one-shot child id, in the parent's cwd.
func (p *Provider) childSession(id string, req subagent.ResolvedRequest) store.Session {
	return turnlog.Session(id, p.cfg.Name, req.Parent.Session.Cwd, req)
}

// message is the A2A message of a prompt's text blocks, in a new context.
func message(prompt []model.Block) *sdk.Message {
	parts := make([]*sdk.Part, len(prompt))
	for i, b := range prompt {
		parts[i] = sdk.NewTextPart(b.Text)
	}
	return sdk.NewMessage(sdk.MessageRoleUser, parts...)
}

// An A2A child's turn has one step, like an ACP child's.
const (
	turn = 1
	step = 1
)
