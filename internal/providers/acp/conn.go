package acp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

// handler is the owner of an agent connection — a one-shot run or a
// continuable child — and receives what the agent sends on its own
// initiative.
type handler interface {
	sessionUpdate(n sdk.SessionNotification)
	requestPermission(req sdk.RequestPermissionRequest) sdk.RequestPermissionResponse
}

// live is one running agent: its process, its ACP connection and the
// capabilities it advertised in initialize.
type live struct {
	p      *Provider
	log    *slog.Logger
	proc   *process
	conn   *sdk.ClientSideConnection
	caps   sdk.AgentCapabilities
	client *client

	releaseOnce sync.Once
	released    chan struct{}
	releaseErr  error
}

// settledGrace bounds each rung of the teardown ladder for an agent with no
// prompt in flight: it has nothing left to finish, and agents that ignore
// stdin EOF (codex) must not cost the whole EOF grace.
const settledGrace = 200 * time.Millisecond

// launch spawns the agent in cwd and performs initialize, offering the
// file system jailed to cwd (fs.go) and recording the agent's
// capabilities. ctx bounds the handshake: when it ends, or the agent
// exits, the process group is reaped.
//
// Returns an EAborted *subagent.Error when ctx ended first and an
// EAgentUnavailable one, naming the exec error, the agent's exit or its
// JSON-RPC error, when the agent could not be started.
func (p *Provider) launch(ctx context.Context, cwd string, h handler, log *slog.Logger) (*live, error) {
	proc, err := spawn(p.cfg.Command, p.cfg.Args, cwd, childEnv(os.Environ(), p.cfg.Env), log)
	if err != nil {
		return nil, p.unavailable("cannot start %s: %v", p.cfg.Command, err)
	}
	ord := newOrder(proc.stdout)
	l := &live{p: p, log: log, proc: proc, released: make(chan struct{}), client: &client{h: h, root: cwd, order: ord}}
	l.conn = sdk.NewClientSideConnection(l.client, proc.stdin, ord)
	l.conn.SetLogger(log)
	err = l.call(ctx, "initialize", func(ctx context.Context) error {
		resp, err := l.conn.Initialize(ctx, sdk.InitializeRequest{
			ProtocolVersion:    sdk.ProtocolVersionNumber,
			ClientInfo:         &sdk.Implementation{Name: "subagentd", Version: "1"},
			ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}},
		})
		l.caps = resp.AgentCapabilities
		return err
	})
	if err != nil {
		l.discard()
		return nil, err
	}
	p.noteCaps(l.caps)
	return l, nil
}

// call runs one handshake request, giving up when ctx ends or the agent
// exits. Returns EAborted or EAgentUnavailable *subagent.Error values.
func (l *live) call(ctx context.Context, step string, do func(context.Context) error) error {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-l.proc.exited:
			cancel(errExited)
		case <-hctx.Done():
		}
	}()
	err := do(hctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errAborted()
	case errors.Is(context.Cause(hctx), errExited) || disconnected(err):
		return l.p.unavailable("%s: %s", step, l.exitDiagnostic())
	}
	var re *sdk.RequestError
	if errors.As(err, &re) {
		return l.p.unavailable("%s: %s", step, l.p.rpcMessage(re))
	}
	return l.p.unavailable("%s: %v", step, err)
}

// newSession opens a new ACP session in cwd (session/new). Returns call's
// errors.
func (l *live) newSession(ctx context.Context, cwd string) (sdk.SessionId, error) {
	var session sdk.SessionId
	err := l.call(ctx, "session/new", func(ctx context.Context) error {
		resp, err := l.conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: cwd, McpServers: []sdk.McpServer{}})
		if err == nil && resp.SessionId == "" {
			err = errors.New("the agent answered without a session id")
		}
		session = resp.SessionId
		return err
	})
	return session, err
}

// unavailable is the EAgentUnavailable error of this provider.
func (p *Provider) unavailable(format string, args ...any) error {
	return &subagent.Error{Code: subagent.EAgentUnavailable,
		Message: subagent.TruncateDiagnostic(fmt.Sprintf("ACP agent of provider %q is unavailable: ", p.cfg.Name) + fmt.Sprintf(format, args...))}
}

// discard reaps an agent that failed its handshake, logging a group that
// survived.
func (l *live) discard() {
	if err := l.release(false, ""); err != nil {
		l.log.Error("ACP agent not reaped after a failed start", slog.Any("error", err))
	}
}

// release reaps the process group once and waits for the connection to
// close; every call returns the first call's outcome. idle says that no
// prompt is in flight: session/close goes first where the agent offers it
// (for session), and each rung of the ladder waits at most settledGrace.
// Mid-prompt the configured graces apply. Returns an error only when the
// group survived SIGKILL.
func (l *live) release(idle bool, session sdk.SessionId) error {
	l.releaseOnce.Do(func() {
		eofGrace, grace := l.p.cfg.DisposeEOFGrace, l.p.cfg.DisposeGrace
		if idle {
			if l.caps.SessionCapabilities.Close != nil && session != "" {
				ctx, cancel := context.WithTimeout(context.Background(), settledGrace)
				if _, err := l.conn.CloseSession(ctx, sdk.CloseSessionRequest{SessionId: session}); err != nil {
					l.log.Debug("session/close failed", slog.Any("error", err))
				}
				cancel()
			}
			eofGrace, grace = min(eofGrace, settledGrace), min(grace, settledGrace)
		}
		l.releaseErr = l.proc.stop(eofGrace, grace)
		<-l.conn.Done()
		close(l.released)
	})
	<-l.released
	return l.releaseErr
}

// exitDiagnostic describes the end of an agent whose connection broke. The
// process normally exits with its stdout; wait for that, within a grace.
func (l *live) exitDiagnostic() string {
	grace := time.NewTimer(l.p.cfg.DisposeGrace)
	defer grace.Stop()
	select {
	case <-l.proc.exited:
		return l.proc.exitDescription()
	case <-grace.C:
		return "agent closed its connection"
	}
}

// failure is the safe diagnostic of a failed prompt: how the process ended
// when the connection broke, else the agent's JSON-RPC error message.
func (l *live) failure(err error) string {
	if errors.Is(err, errExited) || disconnected(err) {
		return l.exitDiagnostic()
	}
	var re *sdk.RequestError
	if errors.As(err, &re) {
		return l.p.rpcMessage(re)
	}
	return "session/prompt failed"
}

// prompt sends blocks as a session/prompt and waits for the answer, for
// stop to close or for the agent to exit. Once stop closed it waits
// patience more for the agent's answer to its cancellation, then returns
// errStopped. The request itself ends with the connection at the latest.
// traceparent, the W3C trace context of the run's span ("" when not
// traced), goes in the request's _meta, so that the agent's own spans
// join the trace.
func (l *live) prompt(session sdk.SessionId, blocks []sdk.ContentBlock, stop <-chan struct{}, patience time.Duration, traceparent string) (sdk.PromptResponse, error) {
	type answer struct {
		resp sdk.PromptResponse
		err  error
	}
	req := sdk.PromptRequest{SessionId: session, Prompt: blocks}
	if traceparent != "" {
		req.Meta = map[string]any{"traceparent": traceparent}
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := l.conn.Prompt(context.Background(), req)
		answered <- answer{resp, err}
	}()
	select {
	case a := <-answered:
		return a.resp, a.err
	case <-stop:
		wait := time.NewTimer(patience)
		defer wait.Stop()
		select {
		case a := <-answered:
			return a.resp, a.err
		case <-wait.C:
			return sdk.PromptResponse{}, errStopped
		}
	case <-l.proc.exited:
	}
	// The agent died with the prompt pending. Its last messages may still
	// be in the pipe: let the connection deliver them, but do not wait for
	// a descendant that keeps the pipe open.
	grace := time.NewTimer(l.p.cfg.DisposeGrace)
	defer grace.Stop()
	select {
	case a := <-answered:
		return a.resp, a.err
	case <-stop:
		return sdk.PromptResponse{}, errStopped
	case <-grace.C:
		return sdk.PromptResponse{}, errExited
	}
}

var (
	errExited  = errors.New("agent process exited")
	errStopped = errors.New("prompt abandoned")
)

// sendCancel sends session/cancel, best effort: the write blocks at most
// until the connection closes.
func (l *live) sendCancel(session sdk.SessionId) {
	if err := l.conn.Cancel(context.Background(), sdk.CancelNotification{SessionId: session}); err != nil {
		l.log.Debug("session/cancel not sent", slog.Any("error", err))
	}
}

// client is the service's side of the protocol: what the agent may call,
// answered by the connection's current owner.
type client struct {
	// root is the workspace the agent's file system requests are jailed
	// to: the cwd it runs in, symlinks resolved (fs.go).
	root string
	// order keeps each permission request after the session updates the
	// agent sent before it.
	order *order

	mu sync.Mutex
	h  handler
	// fsCalls numbers the file accesses, for their permission requests'
	// tool call ids.
	fsCalls int
}

var _ sdk.Client = (*client)(nil)

// attach makes h the owner of the connection: an idle agent taken up by
// a new activation of its child.
func (l *live) attach(h handler) {
	l.client.mu.Lock()
	l.client.h = h
	l.client.mu.Unlock()
}

func (c *client) handler() handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h
}

func (c *client) SessionUpdate(_ context.Context, n sdk.SessionNotification) error {
	c.handler().sessionUpdate(n)
	c.order.handled()
	return nil
}

func (c *client) RequestPermission(ctx context.Context, req sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	c.order.wait(ctx)
	return c.handler().requestPermission(req), nil
}

// The service offers agents no terminal (it does not advertise the
// capability), so these requests are refused; the file system is fs.go's.

func (c *client) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalWaitForExit)
}

// choose picks the option the policy calls for, preferring the one-time
// kind. Rejecting with a reject option (rather than "cancelled", which means
// the whole turn was cancelled) lets the agent carry on without the tool.
func choose(policy string, options []sdk.PermissionOption) *sdk.PermissionOption {
	kinds := []sdk.PermissionOptionKind{sdk.PermissionOptionKindRejectOnce, sdk.PermissionOptionKindRejectAlways}
	if policy == config.PermissionAllow {
		kinds = []sdk.PermissionOptionKind{sdk.PermissionOptionKindAllowOnce, sdk.PermissionOptionKindAllowAlways}
	}
	for _, k := range kinds {
		for i := range options {
			if options[i].Kind == k {
				return &options[i]
			}
		}
	}
	return nil
}

// decide answers a permission request by the policy's decision: "allow"
// selects an allow option, "reject" a reject option; with no fitting
// option, or when cancelled, the outcome is "cancelled". It returns the
// answer and its acp/permission record for turn.
func decide(req sdk.RequestPermissionRequest, decision string, cancelled bool, turn int) (sdk.RequestPermissionResponse, sessionlog.ACPPermissionData) {
	var chosen *sdk.PermissionOption
	if !cancelled {
		chosen = choose(decision, req.Options)
	}
	d := sessionlog.ACPPermissionData{Turn: turn, ToolCallID: string(req.ToolCall.ToolCallId), Outcome: "cancelled"}
	if req.ToolCall.Title != nil {
		d.Title = *req.ToolCall.Title
	}
	resp := permissionCancelled()
	if chosen != nil {
		d.Outcome, d.OptionID, d.OptionKind = "selected", string(chosen.OptionId), string(chosen.Kind)
		resp.Outcome = sdk.RequestPermissionOutcome{
			Selected: &sdk.RequestPermissionOutcomeSelected{Outcome: "selected", OptionId: chosen.OptionId},
		}
	}
	return resp, d
}
