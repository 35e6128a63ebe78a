// Package mcp is the MCP face of subagentd: a Model Context Protocol server
// over Streamable HTTP (github.com/modelcontextprotocol/go-sdk), stateless
// so that any replica answers any request, whose tools let an MCP client
// (Claude Code, Cursor, an SDK) delegate through the service.
//
// Each tool is a thin call of one REST operation (API): its arguments use
// the REST field names and become that route's request body, which the
// route validates as it validates its own; its result is the route's JSON
// body, as structuredContent and as text. What the face adds is only what
// MCP asks for: a prompt may be a plain string, parentSessionId may be
// left out (the tenant's root session labelled "mcp" serves), and a wait
// is a tool argument rather than a Prefer header or query parameter.
// Invalid arguments, and every other refusal, are tool errors (isError)
// whose text starts with the problem code; an unknown tool is a protocol
// error (the SDK answers it).
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/subagentd/subagentd/internal/subagent"
)

// API is the REST API's operations the tools call; *http.Server implements
// it (internal/http/operations.go). Each answers its route's JSON body, or
// a client-safe *subagent.Error.
type API interface {
	// ListProviders answers GET /v1/providers.
	ListProviders(ctx context.Context) (json.RawMessage, error)
	// StartRun answers POST /v1/runs, waiting up to wait for the run to
	// settle.
	StartRun(ctx context.Context, body []byte, wait time.Duration) (json.RawMessage, error)
	// GetRun answers GET /v1/runs/{runId}, waiting up to wait for the run
	// to settle.
	GetRun(ctx context.Context, runID string, wait time.Duration) (json.RawMessage, error)
	// StartSubagent answers POST /v1/subagents.
	StartSubagent(ctx context.Context, body []byte) (json.RawMessage, error)
	// Followup answers POST /v1/subagents/{childId}/followup.
	Followup(ctx context.Context, childID string, body []byte) (json.RawMessage, error)
	// FollowupAsync answers POST /v1/subagents/{childId}/followup with
	// Prefer: respond-async: at the message's acceptance.
	FollowupAsync(ctx context.Context, childID string, body []byte) (json.RawMessage, error)
	// Interrupt answers POST /v1/subagents/{childId}/interrupt.
	Interrupt(ctx context.Context, childID string, body []byte) (json.RawMessage, error)
	// GetTask answers GET /v1/tasks/{taskId}, waiting up to wait for the
	// activation to settle.
	GetTask(ctx context.Context, taskID string, wait time.Duration) (json.RawMessage, error)
	// CancelTree answers POST /v1/sessions/{id}/cancel.
	CancelTree(ctx context.Context, sessionID string) (json.RawMessage, error)
	// ListApprovals answers GET /v1/approvals with query as its query.
	ListApprovals(ctx context.Context, query url.Values) (json.RawMessage, error)
	// DecideApproval answers POST /v1/approvals/{approvalId}/decision.
	DecideApproval(ctx context.Context, approvalID string, body []byte) (json.RawMessage, error)
	// FaceRoot returns the id of the tenant's root session labelled label,
	// creating it on first use.
	FaceRoot(ctx context.Context, label string) (string, error)
}

// RootLabel labels the root session that tools use when the arguments
// name no parentSessionId.
const RootLabel = "mcp"

// Bounds of a tool's wait argument, in seconds. DefaultDelegateWait is
// delegate's when none is given; get_run and get_task answer at once by
// default.
const (
	MaxWait             = 300
	DefaultDelegateWait = 30
)

// Config configures NewHandler. API is required.
type Config struct {
	API    API
	Logger *slog.Logger
	// Version is reported as the server's version at initialization.
	Version string
}

// NewHandler returns the Streamable HTTP handler of the face. It is
// stateless (every POST stands alone, so any replica answers it; GET and
// DELETE are 405) and answers in JSON rather than an event stream, since
// no tool sends anything before its result. It checks no Host and no
// token: the caller serves it behind the same guard as the REST API.
func NewHandler(cfg Config) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "subagentd", Version: cfg.Version}, &mcp.ServerOptions{Instructions: instructions})
	f := &face{api: cfg.API}
	for _, t := range f.tools() {
		srv.AddTool(t.tool, t.handle)
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		Logger:       cfg.Logger,
		// The guard in front (internal/http) applies the loopback Host rule
		// where it holds, without tokens; the SDK's own check would also
		// refuse a proxied request that carries a valid token.
		DisableLocalhostProtection: true,
	})
}

// instructions tell a client's model how the tools fit together.
const instructions = "subagentd runs child agents for you. For a self-contained task, call delegate: " +
	"it answers the result when the child finishes within `wait` seconds, else a running run to poll with get_run. " +
	"For a conversation you will continue, call start_subagent, then followup with more content and get_task for each turn's result; " +
	"interrupt stops a turn, cancel_tree everything below a session. list_providers names the providers a child can run on. " +
	"An agent may wait for a person to allow a tool call: list_approvals with state pending shows them, decide_approval answers one."

// face holds the tools' handlers.
type face struct {
	api API
}

// tool is one tool and its handler.
type tool struct {
	tool   *mcp.Tool
	handle mcp.ToolHandler
}

// Tool arguments. They define the input schemas (jsonschema tags describe
// each field); the values themselves reach the REST operation as the
// route's request body (see call).

type noArgs struct{}

type delegateArgs struct {
	Provider        string `json:"provider" jsonschema:"the provider that runs the child, as list_providers names it (spawn: a fresh in-process agent)"`
	Prompt          prompt `json:"prompt"`
	ParentSessionID string `json:"parentSessionId,omitempty" jsonschema:"the session the child is delegated from; default: this tenant's root session labelled mcp"`
	Label           string `json:"label,omitempty" jsonschema:"a short name for the child, shown in listings and the dashboard"`
	Wait            *int   `json:"wait,omitempty" jsonschema:"seconds to wait for the result (0 to 300, default 30); past it the answer is the running run, to poll with get_run"`
}

type startSubagentArgs struct {
	Provider        string `json:"provider" jsonschema:"the provider that runs the child, as list_providers names it"`
	Prompt          prompt `json:"prompt"`
	Label           string `json:"label" jsonschema:"a short name for the child, shown in listings and the dashboard"`
	ParentSessionID string `json:"parentSessionId,omitempty" jsonschema:"the child's durable parent session; default: this tenant's root session labelled mcp"`
	ChildID         string `json:"childId,omitempty" jsonschema:"an id to give the child (letters, digits, '.', '_', '-'); default: a fresh one"`
}

type followupArgs struct {
	ChildID         string `json:"childId" jsonschema:"the continuable child, as start_subagent answered"`
	Content         prompt `json:"content"`
	Async           bool   `json:"async,omitempty" jsonschema:"answer as soon as the message is accepted (route accepted) instead of once it is steered or started; its route is then announced as lifecycle event message/routed"`
	ParentSessionID string `json:"parentSessionId,omitempty" jsonschema:"the child's durable parent session; default: this tenant's root session labelled mcp"`
}

type interruptArgs struct {
	ChildID         string `json:"childId" jsonschema:"the continuable child whose current turn stops"`
	ParentSessionID string `json:"parentSessionId,omitempty" jsonschema:"the child's durable parent session; default: this tenant's root session labelled mcp"`
}

type getRunArgs struct {
	RunID string `json:"runId" jsonschema:"the run, as delegate answered"`
	Wait  *int   `json:"wait,omitempty" jsonschema:"seconds to wait for a running run to settle (0 to 300, default 0)"`
}

type getTaskArgs struct {
	TaskID string `json:"taskId" jsonschema:"the task, as start_subagent or followup answered"`
	Wait   *int   `json:"wait,omitempty" jsonschema:"seconds to wait for a running task to settle (0 to 300, default 0)"`
}

type cancelTreeArgs struct {
	SessionID string `json:"sessionId,omitempty" jsonschema:"the session whose tree (every run and turn below it) stops; default: this tenant's root session labelled mcp"`
}

type listApprovalsArgs struct {
	State         string `json:"state,omitempty" jsonschema:"only approvals in this state: pending, decided, expired or cancelled"`
	RootSessionID string `json:"rootSessionId,omitempty" jsonschema:"only approvals of this root session's tree"`
	SessionID     string `json:"sessionId,omitempty" jsonschema:"only approvals the agent of this session asked for"`
	After         string `json:"after,omitempty" jsonschema:"the nextCursor of the previous page"`
	Limit         *int   `json:"limit,omitempty" jsonschema:"page size (default 100)"`
}

type decideApprovalArgs struct {
	ApprovalID string `json:"approvalId" jsonschema:"the approval, as list_approvals answered it"`
	OptionID   string `json:"optionId,omitempty" jsonschema:"one of the approval's options, by optionId; or give outcome instead"`
	Outcome    string `json:"outcome,omitempty" jsonschema:"allow or reject: the agent's own option of that kind is chosen"`
	Scope      string `json:"scope,omitempty" jsonschema:"once (default) or always, with outcome"`
	Reason     string `json:"reason,omitempty" jsonschema:"why, recorded with the decision"`
}

// prompt is content: a string, or content blocks. Its schema is
// promptSchema.
type prompt json.RawMessage

// promptSchema is the schema of a prompt or followup content.
var promptSchema = &jsonschema.Schema{
	Description: `the text for the child, or content blocks such as [{"type":"text","text":"…"}]`,
	OneOf: []*jsonschema.Schema{
		{Type: "string", MinLength: new(1)},
		{Type: "array", MinItems: new(1), Items: &jsonschema.Schema{
			Type:       "object",
			Required:   []string{"type"},
			Properties: map[string]*jsonschema.Schema{"type": {Type: "string"}, "text": {Type: "string"}},
		}},
	},
}

// tools lists the face's tools.
func (f *face) tools() []tool {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}
	return []tool{
		define[noArgs]("list_providers", "List the providers a child can run on: spawn and fork (in-process agents) and configured ACP agents, with what each supports.", readOnly,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.ListProviders(ctx)
			}),
		define[delegateArgs]("delegate", "Delegate a task to a new one-shot child agent and wait up to `wait` seconds for its result. The answer is the run: state settled with result.output (and result.stopReason: completed, or why it failed), or state running with a runId to poll with get_run.", nil,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				wait := a.wait(DefaultDelegateWait)
				a.content("prompt")
				a.parent(ctx, f.api)
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.StartRun(ctx, a.body(), wait)
			}),
		define[startSubagentArgs]("start_subagent", "Start a continuable child agent: it works on the prompt and keeps its conversation for later followups. Answers childId and the taskId of its first turn (poll it with get_task).", nil,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				a.content("prompt")
				a.parent(ctx, f.api)
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.StartSubagent(ctx, a.body())
			}),
		define[followupArgs]("followup", "Send more content to a continuable child: steered into its running turn, or started as a new turn (a new taskId) when it is idle.", nil,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				child := a.id("childId")
				async := a.flag("async")
				a.content("content")
				a.parent(ctx, f.api)
				if err := a.err(); err != nil {
					return nil, err
				}
				if async {
					return f.api.FollowupAsync(ctx, child, a.body())
				}
				return f.api.Followup(ctx, child, a.body())
			}),
		define[getRunArgs]("get_run", "Read a one-shot run: its state and, once settled, its result; waits up to `wait` seconds for a running one to settle.", readOnly,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				run := a.id("runId")
				wait := a.wait(0)
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.GetRun(ctx, run, wait)
			}),
		define[getTaskArgs]("get_task", "Read a task (one turn of a continuable child): its state and, once settled, its result; waits up to `wait` seconds for a running one to settle.", readOnly,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				task := a.id("taskId")
				wait := a.wait(0)
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.GetTask(ctx, task, wait)
			}),
		define[interruptArgs]("interrupt", "Stop the current turn of a continuable child; it stays available for followups.", nil,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				child := a.id("childId")
				a.parent(ctx, f.api)
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.Interrupt(ctx, child, a.body())
			}),
		define[cancelTreeArgs]("cancel_tree", "Cancel everything running below a session: every run and turn of its children and their children stops (aborted, 'cancelled by tree'), and a root's own turn too. Answers how many it stopped; later work runs normally.", nil,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				session := a.session(ctx, f.api)
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.CancelTree(ctx, session)
			}),
		define[listApprovalsArgs]("list_approvals", "List approvals: tool calls that agents asked a person to allow (with the call's title, kind and input, and the agent's options), oldest first. Filter by state (pending for those waiting), tree or session.", readOnly,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				query := a.query()
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.ListApprovals(ctx, query)
			}),
		define[decideApprovalArgs]("decide_approval", "Decide a pending approval: choose one of its options by optionId, or give outcome allow or reject. The agent gets the answer at once; the first decision wins.", nil,
			func(ctx context.Context, a *args) (json.RawMessage, error) {
				approval := a.id("approvalId")
				if err := a.err(); err != nil {
					return nil, err
				}
				return f.api.DecideApproval(ctx, approval, a.body())
			}),
	}
}

// define returns tool name, whose input schema is inferred from In (waits
// bounded by MaxWait, prompts as promptSchema), and whose handler runs do
// with the call's arguments and answers what it returns (see result).
func define[In any](name, description string, annotations *mcp.ToolAnnotations, do func(context.Context, *args) (json.RawMessage, error)) tool {
	schema, err := jsonschema.For[In](&jsonschema.ForOptions{
		TypeSchemas: map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[prompt](): promptSchema},
	})
	if err != nil {
		panic(fmt.Sprintf("input schema of tool %s: %v", name, err)) // the argument types are fixed
	}
	if w, ok := schema.Properties["wait"]; ok {
		w.Type, w.Types = "integer", nil
		w.Minimum, w.Maximum = new(0.0), new(float64(MaxWait))
	}
	known := slices.Collect(maps.Keys(schema.Properties))
	return tool{
		tool: &mcp.Tool{Name: name, Description: description, InputSchema: schema, Annotations: annotations},
		handle: func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return result(do(ctx, parseArgs(req.Params.Arguments, known)))
		},
	}
}

// result is a tool's answer: a REST body as structuredContent and as
// text; a refusal (*subagent.Error) as a tool error whose text is
// "CODE: message" and whose structuredContent is the code, the message
// and the invalid fields. Any other error (the call was cancelled) is a
// protocol error.
func result(out json.RawMessage, err error) (*mcp.CallToolResult, error) {
	var se *subagent.Error
	switch {
	case err == nil:
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}, StructuredContent: out}, nil
	case errors.As(err, &se):
		return &mcp.CallToolResult{
			IsError:           true,
			Content:           []mcp.Content{&mcp.TextContent{Text: se.Error()}},
			StructuredContent: problem{Code: se.Code, Detail: se.Message, Errors: se.Fields},
		}, nil
	default:
		return nil, err
	}
}

// problem is a tool error's structuredContent, in the words of the REST
// API's problem+json.
type problem struct {
	Code   string            `json:"code"`
	Detail string            `json:"detail"`
	Errors map[string]string `json:"errors,omitempty"`
}
