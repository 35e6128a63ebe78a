package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/subagentd/subagentd/internal/agent"
	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// An ACP child runs exactly one prompt: one turn with one step.
const (
	turn = 1
	step = 1
)

// run is a published ACP child. Its result settles exactly once, first
// come: the prompt's answer, a failure, or a local cancellation, which never
// waits for the agent (R26).
type run struct {
	p         *Provider
	log       *slog.Logger
	childID   string
	proc      *process
	conn      *sdk.ClientSideConnection
	sessionID sdk.SessionId // set by the handshake, before publication
	// logCtx carries the start request's values (its tenant) without its
	// cancellation, for log writes: the child's log outlives the request.
	logCtx context.Context

	done       chan struct{} // closed once the result settled
	cancelled  chan struct{} // closed by the first cancel
	cancelOnce sync.Once
	cancelSent chan struct{} // closed once session/cancel was written or failed
	driveDone  chan struct{}

	disposeOnce sync.Once
	disposed    chan struct{}
	disposeErr  error

	// mu guards the fields below and serialises log writes, so that nothing
	// is appended after the turn/end that settlement writes.
	mu      sync.Mutex
	logging bool // the child session exists
	text    strings.Builder
	settled bool
	result  subagent.Result
}

var _ subagent.Run = (*run)(nil)

func newRun(logCtx context.Context, p *Provider, childID string, proc *process, log *slog.Logger) *run {
	r := &run{
		p: p, log: log, childID: childID, proc: proc, logCtx: logCtx,
		done: make(chan struct{}), cancelled: make(chan struct{}), cancelSent: make(chan struct{}),
		driveDone: make(chan struct{}), disposed: make(chan struct{}),
	}
	r.conn = sdk.NewClientSideConnection((*client)(r), proc.stdin, proc.stdout)
	r.conn.SetLogger(log)
	return r
}

// ChildID is the child session's id, minted by the service: ACP session ids
// are only unique within one agent process.
func (r *run) ChildID() string { return r.childID }

// Local is false: the child is an external process.
func (r *run) Local() bool { return false }

// Done is closed once the result has settled.
func (r *run) Done() <-chan struct{} { return r.done }

// Result waits for settlement and returns the result. It never fails: agent
// errors and crashes settle as stop reason "error" (R27).
func (r *run) Result() (subagent.Result, error) {
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result, nil
}

// Cancel settles the run "aborted" at once, unless it already settled, and
// sends session/cancel without waiting for the agent (R23, R26).
func (r *run) Cancel() { r.cancel(agent.CauseParent) }

func (r *run) cancel(cause string) {
	r.cancelOnce.Do(func() {
		close(r.cancelled)
		go func() {
			defer close(r.cancelSent)
			// Best effort: disposal is what actually stops the agent. The
			// write blocks at most until disposal closes the pipe.
			if err := r.conn.Cancel(context.Background(), sdk.CancelNotification{SessionId: r.sessionID}); err != nil {
				r.log.Debug("session/cancel not sent", slog.Any("error", err))
			}
		}()
		r.settle(outcome{reason: subagent.StopAborted, cause: cause})
	})
}

// Dispose cancels (sending session/cancel), then tears the agent down: stdin
// EOF, SIGTERM and SIGKILL to its process group, each after its grace. It
// returns once the whole group is gone and the connection closed (R28, R29).
// Every call returns the same outcome; ctx only bounds how long this call
// waits. Returns an error only when the process group survived SIGKILL (R30).
func (r *run) Dispose(ctx context.Context) error {
	r.disposeOnce.Do(func() {
		r.cancel(agent.CauseDisposed)
		go func() {
			// session/cancel goes out before the EOF, unless the pipe is so
			// full that writing it would outlast the EOF grace.
			sent := time.NewTimer(r.p.cfg.DisposeEOFGrace)
			select {
			case <-r.cancelSent:
			case <-sent.C:
			}
			sent.Stop()
			r.disposeErr = r.release()
			<-r.driveDone
			<-r.cancelSent
			close(r.disposed)
		}()
	})
	select {
	case <-r.disposed:
		return r.disposeErr
	case <-ctx.Done():
		return fmt.Errorf("dispose ACP child %s: %w", r.childID, ctx.Err())
	}
}

// release reaps the process group and waits for the connection to close.
func (r *run) release() error {
	err := r.proc.stop(r.p.cfg.DisposeEOFGrace, r.p.cfg.DisposeGrace)
	<-r.conn.Done()
	return err
}

// drive sends the prompt and settles with its answer. A local cancel
// settles without it.
func (r *run) drive(prompt []model.Block) {
	defer close(r.driveDone)
	blocks := make([]sdk.ContentBlock, len(prompt))
	for i, b := range prompt {
		blocks[i] = sdk.TextBlock(b.Text)
	}
	type answer struct {
		resp sdk.PromptResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		// The request ends with the connection at the latest, which
		// disposal closes.
		resp, err := r.conn.Prompt(context.Background(), sdk.PromptRequest{SessionId: r.sessionID, Prompt: blocks})
		answered <- answer{resp, err}
	}()
	var a answer
	select {
	case a = <-answered:
	case <-r.cancelled:
		return
	case <-r.proc.exited:
		// The agent died with the prompt pending. Its last messages may still
		// be in the pipe: let the connection deliver them, but do not wait
		// for a descendant that keeps the pipe open.
		grace := time.NewTimer(r.p.cfg.DisposeGrace)
		defer grace.Stop()
		select {
		case a = <-answered:
		case <-r.cancelled:
			return
		case <-grace.C:
			a = answer{err: errExited}
		}
	}
	if a.err != nil {
		diagnostic := r.failure(a.err)
		r.log.Warn("ACP child failed", slog.String("diagnostic", diagnostic), slog.Any("error", a.err))
		r.settle(outcome{reason: subagent.StopError, diagnostic: diagnostic})
		return
	}
	o := stopOutcome(a.resp.StopReason)
	if u := a.resp.Usage; u != nil {
		o.usage = &agent.UsageData{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	}
	r.settle(o)
}

// failure is the safe diagnostic of a failed prompt: how the process ended
// when the connection broke, else the agent's JSON-RPC error message.
func (r *run) failure(err error) string {
	if errors.Is(err, errExited) || disconnected(err) {
		return r.exitDiagnostic()
	}
	var re *sdk.RequestError
	if errors.As(err, &re) {
		return rpcMessage(re)
	}
	return "session/prompt failed"
}

// disconnected reports whether err is the SDK's account of a connection that
// closed before the answer came (an internal error whose data says "peer
// disconnected…"), rather than an error the agent sent.
func disconnected(err error) bool {
	var re *sdk.RequestError
	if !errors.As(err, &re) {
		return false
	}
	data, _ := re.Data.(map[string]any)
	msg, _ := data["error"].(string)
	return strings.HasPrefix(msg, "peer disconnected")
}

// exitDiagnostic describes the end of an agent whose connection broke. The
// process normally exits with its stdout; wait for that, within a grace.
func (r *run) exitDiagnostic() string {
	grace := time.NewTimer(r.p.cfg.DisposeGrace)
	defer grace.Stop()
	select {
	case <-r.proc.exited:
		return r.proc.exitDescription()
	case <-grace.C:
		return "agent closed its connection"
	}
}

// outcome is how a run settles.
type outcome struct {
	reason     string
	diagnostic string
	cause      string // who cancelled, for aborted turns
	usage      *agent.UsageData
}

// stopOutcome maps an ACP stop reason (seam-spec §4.8).
func stopOutcome(reason sdk.StopReason) outcome {
	switch reason {
	case sdk.StopReasonEndTurn:
		return outcome{reason: subagent.StopCompleted}
	case sdk.StopReasonMaxTokens:
		return outcome{reason: subagent.StopMaxTokens}
	case sdk.StopReasonRefusal:
		return outcome{reason: subagent.StopRefusal}
	case sdk.StopReasonCancelled:
		return outcome{reason: subagent.StopAborted}
	default:
		return outcome{reason: subagent.StopError, diagnostic: fmt.Sprintf("agent stopped with reason %q", reason)}
	}
}

// turnReason is the turn/end reason of a settled run. A refusal has no agent
// kind; it is logged as "refusal" (the kinds are an open set).
func turnReason(o outcome) agent.TurnReason {
	switch o.reason {
	case subagent.StopCompleted:
		return agent.TurnReason{Kind: agent.ReasonCompleted}
	case subagent.StopMaxTokens:
		return agent.TurnReason{Kind: agent.ReasonMaxTokens}
	case subagent.StopAborted:
		tr := agent.TurnReason{Kind: agent.ReasonAborted}
		if o.cause != "" {
			tr.Cause = &agent.Cause{Kind: o.cause}
		}
		return tr
	case subagent.StopRefusal:
		return agent.TurnReason{Kind: subagent.StopRefusal}
	default:
		return agent.TurnReason{Kind: agent.ReasonError, Message: o.diagnostic}
	}
}

// settle records the result once, with the text streamed so far as output,
// closes the turn in the child log and then closes done, so a reader woken
// by Done finds the log complete.
func (r *run) settle(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	output := []model.Block{}
	if r.text.Len() > 0 {
		output = []model.Block{model.TextBlock(r.text.String())}
	}
	r.result = subagent.Result{
		Output:     output,
		StopReason: o.reason,
		Diagnostic: subagent.TruncateDiagnostic(o.diagnostic),
	}
	o.diagnostic = r.result.Diagnostic
	if len(output) > 0 || o.usage != nil {
		r.appendLocked(agent.EventAssistantMessage, agent.AssistantMessageData{
			Turn: turn, Step: step,
			Message:     agent.AssistantMessage{Role: "assistant", Content: output},
			Usage:       o.usage,
			Interrupted: o.reason == subagent.StopAborted,
		})
	}
	r.appendLocked(agent.EventStepEnd, agent.StepData{Turn: turn, Step: step})
	r.appendLocked(agent.EventTurnEnd, agent.TurnEndData{Turn: turn, Reason: turnReason(o)})
	close(r.done)
}

// appendLocked writes one event to the child log, once it exists; call it
// with mu held. Logging is best effort: a failed write is logged and the run
// goes on (R31).
func (r *run) appendLocked(typ string, payload any) {
	if !r.logging {
		return
	}
	data, err := json.Marshal(payload)
	if err == nil {
		_, err = r.p.store.AppendEvents(r.logCtx, r.childID, store.NewEvent{Type: typ, Data: data})
	}
	if err != nil {
		r.log.Warn("cannot write the ACP child log", slog.String("event", typ), slog.Any("error", err))
	}
}

// client is the run's side of the protocol: what the agent may call.
type client run

var _ sdk.Client = (*client)(nil)

// SessionUpdate streams the agent's progress into the child log. Only
// message text reaches the output; thoughts are logged as reasoning.
func (c *client) SessionUpdate(_ context.Context, n sdk.SessionNotification) error {
	r := (*run)(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	// Nothing is recorded before the child log exists (during the handshake,
	// which is also when sessionID is written) or after the turn ended.
	if !r.logging || r.settled || n.SessionId != r.sessionID {
		return nil
	}
	u := n.Update
	switch {
	case u.AgentMessageChunk != nil:
		if text := blockText(u.AgentMessageChunk.Content); text != "" {
			r.text.WriteString(text)
			r.appendLocked(agent.EventAssistantChunk, agent.ChunkData{Turn: turn, Step: step,
				Chunk: agent.Chunk{Type: string(model.ChunkText), Text: text}})
		}
	case u.AgentThoughtChunk != nil:
		if text := blockText(u.AgentThoughtChunk.Content); text != "" {
			r.appendLocked(agent.EventAssistantChunk, agent.ChunkData{Turn: turn, Step: step,
				Chunk: agent.Chunk{Type: string(model.ChunkReasoning), Text: text}})
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		r.appendLocked(EventToolCall, ToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId),
			Title: tc.Title, Kind: string(tc.Kind), Status: string(tc.Status)})
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		d := ToolCallData{Turn: turn, ToolCallID: string(tc.ToolCallId)}
		if tc.Title != nil {
			d.Title = *tc.Title
		}
		if tc.Kind != nil {
			d.Kind = string(*tc.Kind)
		}
		if tc.Status != nil {
			d.Status = string(*tc.Status)
		}
		r.appendLocked(EventToolCallUpdate, d)
	case u.Plan != nil:
		d := PlanData{Turn: turn, Entries: make([]PlanEntry, len(u.Plan.Entries))}
		for i, e := range u.Plan.Entries {
			d.Entries[i] = PlanEntry{Content: e.Content, Priority: string(e.Priority), Status: string(e.Status)}
		}
		r.appendLocked(EventPlan, d)
	}
	return nil
}

func blockText(b sdk.ContentBlock) string {
	if b.Text != nil {
		return b.Text.Text
	}
	return ""
}

// RequestPermission answers by the configured policy: "allow" selects an
// allow option, "reject" a reject option; with no fitting option, or once the
// run is cancelled, the outcome is "cancelled".
func (c *client) RequestPermission(_ context.Context, req sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	r := (*run)(c)
	var chosen *sdk.PermissionOption
	select {
	case <-r.cancelled:
	default:
		chosen = choose(r.p.cfg.Permission, req.Options)
	}
	d := PermissionData{Turn: turn, ToolCallID: string(req.ToolCall.ToolCallId), Outcome: "cancelled"}
	if req.ToolCall.Title != nil {
		d.Title = *req.ToolCall.Title
	}
	resp := sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{
		Cancelled: &sdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"},
	}}
	if chosen != nil {
		d.Outcome, d.OptionID, d.OptionKind = "selected", string(chosen.OptionId), string(chosen.Kind)
		resp.Outcome = sdk.RequestPermissionOutcome{
			Selected: &sdk.RequestPermissionOutcomeSelected{Outcome: "selected", OptionId: chosen.OptionId},
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.settled {
		r.appendLocked(EventPermission, d)
	}
	return resp, nil
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

// The service offers agents no file system and no terminal (it advertises
// neither capability), so these requests are refused.

func (c *client) ReadTextFile(context.Context, sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	return sdk.ReadTextFileResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodFsReadTextFile)
}

func (c *client) WriteTextFile(context.Context, sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	return sdk.WriteTextFileResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodFsWriteTextFile)
}

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
