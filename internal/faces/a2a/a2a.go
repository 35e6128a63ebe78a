// Package a2a is the A2A v1 face of subagentd (a2a-protocol.org, served
// with github.com/a2aproject/a2a-go/v2): every provider is an A2A agent,
// with a public agent card, a JSON-RPC endpoint and an HTTP+JSON (REST)
// one.
//
// The face keeps no state of its own. Its RequestHandler is a thin layer
// over the REST API's operations (API), which make the same domain calls
// with the same validation as the REST routes:
//
//   - an A2A context is a continuable child: its contextId is the child's
//     id. A message without one starts a child of the provider under the
//     tenant's root session labelled "a2a" (created on first use);
//   - each turn is an A2A task whose id is the activation's taskId; a
//     message naming a context or a running task is a followup of that
//     child, so it is steered into the running task or starts the next;
//   - tasks/cancel interrupts the child; tasks/get reads the task;
//     tasks/list pages through the tasks of a context, or of every
//     context under the "a2a" root session, out of GET /v1/runs;
//   - a stream (message/stream, tasks/subscribe) replays the task's turns
//     from its start out of the child's durable log and follows them until
//     the task settles: text deltas are one appended artifact, the task's
//     state changes are status updates. Subscribing to a settled task is
//     UnsupportedOperation, as A2A v1 says.
//   - a task whose agent waits on an approval is input-required, the
//     approvals' options in its status; a message carrying a decision
//     takes it (approvals.go);
//   - push-notification configs are webhook endpoints scoped to their
//     task (internal/webhooks, push.go): each status change of the task
//     after the config was made is POSTed as a2a-go's push sender posts
//     it (PushBody), with the config's Authorization header, signed as
//     every webhook is (the config's token is the signing key). Without
//     Config.Push the card says pushNotifications false and the methods
//     answer PushNotificationNotSupported.
//
// The extended card is not offered: the card says so, and its method
// answers UnsupportedOperation.
package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	a2alog "github.com/a2aproject/a2a-go/v2/log"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// API is the REST API's operations the face calls; *http.Server
// implements it (internal/http/operations.go). Each answers its route's
// JSON body, or a client-safe *subagent.Error.
type API interface {
	// GetProvider answers GET /v1/providers/{name}.
	GetProvider(ctx context.Context, name string) (json.RawMessage, error)
	// StartSubagent answers POST /v1/subagents.
	StartSubagent(ctx context.Context, body []byte) (json.RawMessage, error)
	// Followup answers POST /v1/subagents/{childId}/followup.
	Followup(ctx context.Context, childID string, body []byte) (json.RawMessage, error)
	// Interrupt answers POST /v1/subagents/{childId}/interrupt.
	Interrupt(ctx context.Context, childID string, body []byte) (json.RawMessage, error)
	// ListRuns answers GET /v1/runs with query as its query.
	ListRuns(ctx context.Context, query url.Values) (json.RawMessage, error)
	// ListApprovals answers GET /v1/approvals with query as its query.
	ListApprovals(ctx context.Context, query url.Values) (json.RawMessage, error)
	// DecideApproval answers POST /v1/approvals/{approvalId}/decision.
	DecideApproval(ctx context.Context, approvalID string, body []byte) (json.RawMessage, error)
	// GetTask answers GET /v1/tasks/{taskId}, waiting up to wait for the
	// activation to settle.
	GetTask(ctx context.Context, taskID string, wait time.Duration) (json.RawMessage, error)
	// FollowTask passes each session-log event of the task's turns to
	// each, from the task's start until it settled, and answers the task
	// as GET /v1/tasks/{taskId} then would.
	FollowTask(ctx context.Context, taskID string, each func(event json.RawMessage) error) (json.RawMessage, error)
	// FaceRoot returns the id of the tenant's root session labelled label,
	// creating it on first use.
	FaceRoot(ctx context.Context, label string) (string, error)
}

// RootLabel labels the root session under which contexts are created.
const RootLabel = "a2a"

// DefaultProvider is the provider whose card the host root serves.
const DefaultProvider = "spawn"

// Paths of the face. Prefix/{provider} is the JSON-RPC endpoint,
// Prefix/{provider}/rest the HTTP+JSON one; each has its card at
// CardPath below it, and the host root has the DefaultProvider's.
const (
	Prefix   = "/a2a"
	CardPath = "/.well-known/agent-card.json"
	RESTPath = "/rest"
)

// Config configures New. API is required.
type Config struct {
	API    API
	Logger *slog.Logger
	// Version is the cards' version.
	Version string
	// Authenticated says that the server needs bearer tokens: the cards
	// then name the bearer security scheme.
	Authenticated bool
	// Heartbeat is the interval of keep-alive comments on streams; 0 sends
	// none.
	Heartbeat time.Duration
	// MaxWait bounds how long a blocking message/send and tasks/cancel
	// wait for the task to settle.
	MaxWait time.Duration
	// Push keeps push-notification configs; nil offers none.
	Push Push
}

// Push is the part of the webhook service (*webhooks.Service) that keeps
// push-notification configs: webhook endpoints scoped to one task.
type Push interface {
	CreatePush(ctx context.Context, p webhooks.PushParams) (store.Webhook, error)
	TaskPush(ctx context.Context, taskID string) ([]store.Webhook, error)
	GetPush(ctx context.Context, taskID, configID string) (store.Webhook, error)
	DeletePush(ctx context.Context, taskID, configID string) error
}

// Face serves the A2A routes; the REST API's router (internal/http)
// routes each to one of its methods, behind the same guard as /v1 (the
// face checks no token).
type Face struct {
	f       *face
	jsonrpc http.Handler
	rest    http.Handler
}

// New returns the face.
func New(cfg Config) *Face {
	f := &face{api: cfg.API, push: cfg.Push, log: cfg.Logger, version: cfg.Version, authenticated: cfg.Authenticated, maxWait: cfg.MaxWait}
	var opts []a2asrv.TransportOption
	if cfg.Heartbeat > 0 {
		opts = append(opts, a2asrv.WithTransportKeepAlive(cfg.Heartbeat))
	}
	h := &handler{f: f}
	return &Face{f: f, jsonrpc: a2asrv.NewJSONRPCHandler(h, opts...), rest: a2asrv.NewRESTHandler(h, opts...)}
}

// Card returns the JSON of the public agent card of provider (""
// names DefaultProvider) as r, a request for it, reaches it: its
// interfaces are at r's host. Errors are the operations' (an unknown
// provider is NO_PROVIDER).
func (x *Face) Card(r *http.Request, provider string) ([]byte, error) {
	if provider == "" {
		provider = DefaultProvider
	}
	return x.f.card(r, provider)
}

// JSONRPC serves the JSON-RPC endpoint of provider, Prefix/{provider}.
func (x *Face) JSONRPC(w http.ResponseWriter, r *http.Request, provider string) {
	x.jsonrpc.ServeHTTP(flusher{w}, x.f.request(r, provider))
}

// REST serves a request below the HTTP+JSON endpoint of provider,
// Prefix/{provider}RESTPath, whose path is still the full one.
func (x *Face) REST(w http.ResponseWriter, r *http.Request, provider string) {
	http.StripPrefix(Prefix+"/"+provider+RESTPath, x.rest).ServeHTTP(flusher{w}, x.f.request(r, provider))
}

// face holds what the handlers share.
type face struct {
	api           API
	push          Push
	log           *slog.Logger
	version       string
	authenticated bool
	maxWait       time.Duration
}

// providerKey keys the provider a request is addressed to.
type providerKey struct{}

// request puts provider in r's context, and the face's logger where the
// SDK logs.
func (f *face) request(r *http.Request, provider string) *http.Request {
	ctx := context.WithValue(r.Context(), providerKey{}, provider)
	if f.log != nil {
		ctx = a2alog.AttachLogger(ctx, f.log)
	}
	return r.WithContext(ctx)
}

// flusher gives the SDK's stream writer the http.Flusher it asks for,
// through http.ResponseController, which reaches the connection past the
// middleware's wrappers.
type flusher struct{ http.ResponseWriter }

func (f flusher) Flush() { _ = http.NewResponseController(f.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection.
func (f flusher) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// providerJSON is the part of GET /v1/providers/{name} a card shows.
type providerJSON struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Local       bool   `json:"local"`
	Resume      bool   `json:"resume"`
}

// card returns the agent card of provider name.
func (f *face) card(r *http.Request, name string) ([]byte, error) {
	raw, err := f.api.GetProvider(r.Context(), name)
	if err != nil {
		return nil, err
	}
	var p providerJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("decode provider %s: %w", name, err)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	base := scheme + "://" + r.Host + Prefix + "/" + p.Name
	kind := "in-process agent"
	if !p.Local {
		kind = "external agent"
	}
	card := &a2a.AgentCard{
		Name:        p.Name,
		Description: p.Description,
		Version:     f.version,
		Provider:    &a2a.AgentProvider{Org: "subagentd", URL: scheme + "://" + r.Host},
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(base, a2a.TransportProtocolJSONRPC),
			a2a.NewAgentInterface(base+RESTPath, a2a.TransportProtocolHTTPJSON),
		},
		Capabilities:       a2a.AgentCapabilities{Streaming: true, PushNotifications: f.push != nil},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{{
			ID: p.Name, Name: p.Name, Description: p.Description,
			Tags: []string{"delegation", kind},
		}},
	}
	if f.authenticated {
		card.SecuritySchemes = a2a.NamedSecuritySchemes{bearerScheme: a2a.HTTPAuthSecurityScheme{
			Scheme: "Bearer", Description: "an API token of subagentd (SUBAGENTD_TOKENS); it names the tenant",
		}}
		card.SecurityRequirements = a2a.SecurityRequirementsOptions{{bearerScheme: a2a.SecuritySchemeScopes{}}}
	}
	data, err := json.Marshal(card)
	if err != nil {
		return nil, fmt.Errorf("encode the card of %s: %w", name, err)
	}
	return data, nil
}

// bearerScheme names the cards' bearer security scheme.
const bearerScheme a2a.SecuritySchemeName = "bearer"

// errorOf maps an operation's error onto an A2A error: the problem code
// picks the A2A error, and the message is the problem's, which is
// client-safe. ctx's own end passes through (the client went away).
func errorOf(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return err
	}
	var se *subagent.Error
	if !errors.As(err, &se) {
		return a2a.NewError(a2a.ErrInternalError, "internal error")
	}
	kind := a2a.ErrInternalError
	switch se.Code {
	case subagent.ETaskNotFound, subagent.ERunNotFound:
		kind = a2a.ErrTaskNotFound
	case subagent.EInvalidRequest, subagent.ESessionNotFound, subagent.EDuplicateChild, subagent.EInvalidMaxDepth, subagent.ENoProvider,
		webhooks.EPushNotFound, webhooks.ETooMany, subagent.EApprovalNotFound, subagent.EAlreadyDecided, subagent.EOptionUnavailable:
		kind = a2a.ErrInvalidParams
	case subagent.EUnsupportedCapability, subagent.ENotResumable, subagent.EDepthExceeded:
		kind = a2a.ErrUnsupportedOperation
	case subagent.EForbidden:
		kind = a2a.ErrUnauthorized
	case subagent.EUnauthenticated:
		kind = a2a.ErrUnauthenticated
	case subagent.ERateLimited, subagent.EDraining, subagent.EAgentUnavailable, subagent.EActivationClosing, subagent.EAborted, subagent.EPayloadTooLarge,
		subagent.EBudgetExhausted, subagent.EDeadlineExceeded, subagent.ELimitExceeded:
		kind = a2a.ErrServerError
	}
	msg := se.Code + ": " + se.Message
	return a2a.NewError(kind, msg).WithErrorInfoMeta(map[string]string{"code": se.Code})
}

// handler is the face's a2asrv.RequestHandler.
type handler struct {
	f *face
}

var _ a2asrv.RequestHandler = (*handler)(nil)

// taskJSON is a task as GET /v1/tasks/{taskId} answers it.
type taskJSON struct {
	TaskID         string      `json:"taskId"`
	ChildSessionID string      `json:"childSessionId"`
	State          string      `json:"state"`
	StartedAt      time.Time   `json:"startedAt"`
	EndedAt        *time.Time  `json:"endedAt"`
	Result         *resultJSON `json:"result"`
	// PendingApprovals counts the approvals the task's agent waits on.
	PendingApprovals int `json:"pendingApprovals"`
	// approvals are those approvals, read for an input-required task's
	// status (handler.approvals).
	approvals []approvalPart
}

// resultJSON is a settled task's result.
type resultJSON struct {
	Output     []block `json:"output"`
	StopReason string  `json:"stopReason"`
	Diagnostic string  `json:"diagnostic"`
}

// block is a content block as the REST API writes it.
type block struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// outputArtifact is the id of a task's one artifact: its text.
const outputArtifact a2a.ArtifactID = "output"

// state is the A2A state of t.
func (t *taskJSON) state() a2a.TaskState {
	if t.State == "running" || t.Result == nil {
		if t.PendingApprovals > 0 {
			return a2a.TaskStateInputRequired
		}
		return a2a.TaskStateWorking
	}
	switch t.Result.StopReason {
	case subagent.StopCompleted:
		return a2a.TaskStateCompleted
	case subagent.StopAborted:
		return a2a.TaskStateCanceled
	case subagent.StopRefusal:
		return a2a.TaskStateRejected
	}
	return a2a.TaskStateFailed
}

// status is t's A2A status: a settled task that did not complete says
// why in an agent message.
func (t *taskJSON) status() a2a.TaskStatus {
	at := t.StartedAt
	if t.EndedAt != nil {
		at = *t.EndedAt
	}
	st := a2a.TaskStatus{State: t.state(), Timestamp: &at}
	if st.State == a2a.TaskStateInputRequired {
		return inputRequired(t.info(), at, t.approvals)
	}
	if t.Result != nil && st.State != a2a.TaskStateCompleted {
		why := t.Result.StopReason
		if t.Result.Diagnostic != "" {
			why += ": " + t.Result.Diagnostic
		}
		st.Message = a2a.NewMessageForTask(a2a.MessageRoleAgent, t.info(), a2a.NewTextPart(why))
	}
	return st
}

func (t *taskJSON) info() a2a.TaskInfo {
	return a2a.TaskInfo{TaskID: a2a.TaskID(t.TaskID), ContextID: t.ChildSessionID}
}

// task is t as an A2A task; its artifact is the task's result.
func (t *taskJSON) task() *a2a.Task {
	out := &a2a.Task{ID: a2a.TaskID(t.TaskID), ContextID: t.ChildSessionID, Status: t.status()}
	if text := t.text(); text != "" {
		out.Artifacts = []*a2a.Artifact{{ID: outputArtifact, Parts: a2a.ContentParts{a2a.NewTextPart(text)}}}
	}
	return out
}

// text is the text of t's result.
func (t *taskJSON) text() string {
	if t.Result == nil {
		return ""
	}
	var b strings.Builder
	for _, blk := range t.Result.Output {
		if blk.Type == "text" {
			b.WriteString(blk.Text)
		}
	}
	return b.String()
}

// decodeTask decodes an operation's task body.
func decodeTask(raw json.RawMessage) (*taskJSON, error) {
	var t taskJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("decode task: %w", err)
	}
	return &t, nil
}

// getTask reads task id, waiting up to wait for it to settle.
func (h *handler) getTask(ctx context.Context, id a2a.TaskID, wait time.Duration) (*taskJSON, error) {
	if id == "" {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "id: the task id is required")
	}
	raw, err := h.f.api.GetTask(ctx, string(id), wait)
	if err != nil {
		return nil, errorOf(ctx, err)
	}
	t, err := decodeTask(raw)
	if err != nil {
		return nil, errorOf(ctx, err)
	}
	if err := h.approvals(ctx, t); err != nil {
		return nil, err
	}
	return t, nil
}

// approvals reads the pending approvals of t when it is input-required.
func (h *handler) approvals(ctx context.Context, t *taskJSON) error {
	if t.state() != a2a.TaskStateInputRequired {
		return nil
	}
	var err error
	t.approvals, err = h.pending(ctx, t)
	return err
}

// GetTask implements a2asrv.RequestHandler: the task as it stands.
func (h *handler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	t, err := h.getTask(ctx, req.ID, 0)
	if err != nil {
		return nil, err
	}
	return t.task(), nil
}

// CancelTask implements a2asrv.RequestHandler: it interrupts the task's
// child and answers the task once it settled (or as it stands after
// MaxWait). A task that settled otherwise than cancelled is not
// cancelable.
func (h *handler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	t, err := h.getTask(ctx, req.ID, 0)
	if err != nil {
		return nil, err
	}
	if st := t.state(); st.Terminal() {
		if st == a2a.TaskStateCanceled {
			return t.task(), nil
		}
		return nil, a2a.NewError(a2a.ErrTaskNotCancelable, fmt.Sprintf("task %s is %s", t.TaskID, st))
	}
	root, err := h.f.api.FaceRoot(ctx, RootLabel)
	if err != nil {
		return nil, errorOf(ctx, err)
	}
	body, _ := json.Marshal(map[string]string{"parentSessionId": root})
	if _, err := h.f.api.Interrupt(ctx, t.ChildSessionID, body); err != nil {
		return nil, errorOf(ctx, err)
	}
	if t, err = h.getTask(ctx, req.ID, h.f.maxWait); err != nil {
		return nil, err
	}
	return t.task(), nil
}

// sent is where a message went: its task, or none (parked behind an
// interrupt).
type sent struct {
	taskID    string
	contextID string
	message   *a2a.Message
}

// send delivers req's message: a new context starts a child of the
// request's provider under the a2a root session; a known context or task
// gets a followup of its child.
func (h *handler) send(ctx context.Context, req *a2a.SendMessageRequest) (sent, error) {
	msg := req.Message
	if msg == nil {
		return sent{}, a2a.NewError(a2a.ErrInvalidParams, "message: required")
	}
	if d, ok := decisionOf(msg); ok {
		return h.sendDecision(ctx, msg, d)
	}
	content, err := contentOf(msg.Parts)
	if err != nil {
		return sent{}, err
	}
	root, err := h.f.api.FaceRoot(ctx, RootLabel)
	if err != nil {
		return sent{}, errorOf(ctx, err)
	}
	childID := msg.ContextID
	if msg.TaskID != "" {
		t, err := h.getTask(ctx, msg.TaskID, 0)
		if err != nil {
			return sent{}, err
		}
		if childID != "" && childID != t.ChildSessionID {
			return sent{}, a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("task %s belongs to context %s, not %s", t.TaskID, t.ChildSessionID, childID))
		}
		if t.state().Terminal() {
			return sent{}, a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("task %s is %s; send the message in its context without the task id to start the next task", t.TaskID, t.state()))
		}
		childID = t.ChildSessionID
	}
	if childID == "" {
		body, _ := json.Marshal(map[string]any{"provider": ctx.Value(providerKey{}), "parentSessionId": root, "label": RootLabel, "prompt": content})
		raw, err := h.f.api.StartSubagent(ctx, body)
		if err != nil {
			return sent{}, errorOf(ctx, err)
		}
		var out struct{ ChildID, TaskID string }
		if err := json.Unmarshal(raw, &out); err != nil {
			return sent{}, errorOf(ctx, err)
		}
		return sent{taskID: out.TaskID, contextID: out.ChildID, message: msg}, nil
	}
	body, _ := json.Marshal(map[string]any{"parentSessionId": root, "content": content})
	raw, err := h.f.api.Followup(ctx, childID, body)
	if err != nil {
		if subagent.ErrorCode(err) == subagent.ESessionNotFound {
			return sent{}, a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("contextId: no context %q", childID))
		}
		return sent{}, errorOf(ctx, err)
	}
	var out struct{ Route, TaskID string }
	if err := json.Unmarshal(raw, &out); err != nil {
		return sent{}, errorOf(ctx, err)
	}
	return sent{taskID: out.TaskID, contextID: childID, message: msg}, nil
}

// sendDecision takes decision d, which msg carries into its task.
func (h *handler) sendDecision(ctx context.Context, msg *a2a.Message, d decision) (sent, error) {
	if msg.TaskID == "" {
		return sent{}, a2a.NewError(a2a.ErrInvalidParams, "message.taskId: a decision names the task that waits on it")
	}
	t, err := h.getTask(ctx, msg.TaskID, 0)
	if err != nil {
		return sent{}, err
	}
	if err := h.decide(ctx, t, d); err != nil {
		return sent{}, err
	}
	return sent{taskID: t.TaskID, contextID: t.ChildSessionID, message: msg}, nil
}

// contentOf converts message parts into content blocks: text as text,
// structured data as its JSON text. Files are not supported.
func contentOf(parts a2a.ContentParts) ([]block, error) {
	if len(parts) == 0 {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "message.parts: at least one part is required")
	}
	out := make([]block, 0, len(parts))
	for _, p := range parts {
		switch c := p.Content.(type) {
		case a2a.Text:
			out = append(out, block{Type: "text", Text: string(c)})
		case a2a.Data:
			data, err := json.Marshal(c.Value)
			if err != nil {
				return nil, a2a.NewError(a2a.ErrInvalidParams, "message.parts: a data part is not JSON")
			}
			out = append(out, block{Type: "text", Text: string(data)})
		default:
			return nil, a2a.NewError(a2a.ErrUnsupportedContentType, "message.parts: only text and data parts are supported")
		}
	}
	return out, nil
}

// parked is the answer to a message that no task runs yet: an interrupt
// stopped the task it was steered into, and it runs first when the
// context is next sent a message.
func parked(s sent) *a2a.Message {
	return a2a.NewMessageForTask(a2a.MessageRoleAgent, a2a.TaskInfo{ContextID: s.contextID},
		a2a.NewTextPart("accepted; the task was interrupted, so the message waits in the context and runs first when the context is next sent a message"))
}

// SendMessage implements a2asrv.RequestHandler: the message's task once
// it settled (or as it stands after MaxWait), or at once with
// returnImmediately.
func (h *handler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	s, err := h.send(ctx, req)
	if err != nil {
		return nil, err
	}
	if s.taskID == "" {
		return parked(s), nil
	}
	wait := h.f.maxWait
	if req.Config != nil && req.Config.ReturnImmediately {
		wait = 0
	}
	t, err := h.getTask(ctx, a2a.TaskID(s.taskID), wait)
	if err != nil {
		return nil, err
	}
	task := t.task()
	task.History = []*a2a.Message{s.message}
	return task, nil
}

// SendStreamingMessage implements a2asrv.RequestHandler: the message's
// task, then its stream (see follow).
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		s, err := h.send(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		if s.taskID == "" {
			yield(parked(s), nil)
			return
		}
		h.follow(ctx, a2a.TaskID(s.taskID), s.message, yield)
	}
}

// SubscribeToTask implements a2asrv.RequestHandler: a running task's
// stream from its start (see follow); a settled one is
// UnsupportedOperation.
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		t, err := h.getTask(ctx, req.ID, 0)
		if err != nil {
			yield(nil, err)
			return
		}
		if st := t.state(); st.Terminal() {
			yield(nil, a2a.NewError(a2a.ErrUnsupportedOperation, fmt.Sprintf("task %s is %s: a terminal task cannot be subscribed to; read it with GetTask", t.TaskID, st)))
			return
		}
		h.follow(ctx, req.ID, nil, yield)
	}
}

// follow streams task id: the task (working, with msg as its history
// when given), then every text delta of its turns from its start as one
// appended artifact, then its final status. When the model streamed no
// text the result's text is sent as the artifact before the final status.
func (h *handler) follow(ctx context.Context, id a2a.TaskID, msg *a2a.Message, yield func(a2a.Event, error) bool) {
	first, err := h.getTask(ctx, id, 0)
	if err != nil {
		yield(nil, err)
		return
	}
	info := first.info()
	start := &a2a.Task{ID: id, ContextID: info.ContextID, Status: a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: &first.StartedAt}}
	if msg != nil {
		start.History = []*a2a.Message{msg}
	}
	if !yield(start, nil) {
		return
	}
	streamed := false
	errStop := errors.New("the subscriber left")
	raw, err := h.f.api.FollowTask(ctx, string(id), func(ev json.RawMessage) error {
		if st, ok := approvalStatus(info, ev); ok {
			if !yield(&a2a.TaskStatusUpdateEvent{TaskID: id, ContextID: info.ContextID, Status: st}, nil) {
				return errStop
			}
			return nil
		}
		text := deltaText(ev)
		if text == "" {
			return nil
		}
		up := a2a.NewArtifactUpdateEvent(info, outputArtifact, a2a.NewTextPart(text))
		up.Append = streamed
		streamed = true
		if !yield(up, nil) {
			return errStop
		}
		return nil
	})
	switch {
	case errors.Is(err, errStop):
		return
	case err != nil:
		yield(nil, errorOf(ctx, err))
		return
	}
	t, err := decodeTask(raw)
	if err != nil {
		yield(nil, errorOf(ctx, err))
		return
	}
	if !t.state().Terminal() {
		return // the server is shutting down; the client subscribes again
	}
	if text := t.text(); !streamed && text != "" {
		up := a2a.NewArtifactUpdateEvent(info, outputArtifact, a2a.NewTextPart(text))
		up.Append = false
		if !yield(up, nil) {
			return
		}
	}
	yield(&a2a.TaskStatusUpdateEvent{TaskID: id, ContextID: info.ContextID, Status: t.status()}, nil)
}

// deltaText is the text of a session-log event that is an assistant
// text delta, else "".
func deltaText(raw json.RawMessage) string {
	var ev struct {
		Type string `json:"type"`
		Data struct {
			Chunk struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"chunk"`
		} `json:"data"`
	}
	if json.Unmarshal(raw, &ev) != nil || ev.Type != "assistant/chunk" || ev.Data.Chunk.Type != "text-delta" {
		return ""
	}
	return ev.Data.Chunk.Text
}

// GetExtendedAgentCard implements a2asrv.RequestHandler: the card says
// extendedAgentCard false.
func (h *handler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.NewError(a2a.ErrUnsupportedOperation, "there is no extended agent card; the public card is complete")
}
