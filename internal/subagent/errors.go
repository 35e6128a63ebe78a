package subagent

import (
	"errors"
	"fmt"

	"github.com/subagentd/subagentd/internal/resident"
)

// ErrSteerRejected: a steer was not admitted into a model step (the agent
// was idle, cancelled or closed, had a structured capture, or its turn
// ended first; an ACP agent takes no content mid-turn). A ChildAgent's
// steer fails matching it; the seam answers it as ESteerRejected.
var ErrSteerRejected = errors.New("steer rejected")

// Error codes. They are the stable `code` values of the HTTP API
// (api/openapi.yaml) and of the seam (docs/seam.md); internal/http maps
// each to a status in one table.
const (
	ENoProvider            = "NO_PROVIDER"
	EDuplicateProvider     = "DUPLICATE_PROVIDER"
	ESessionNotFound       = "SESSION_NOT_FOUND"
	ERunNotFound           = "RUN_NOT_FOUND"
	ETaskNotFound          = "TASK_NOT_FOUND"
	EUnsupportedCapability = "UNSUPPORTED_CAPABILITY"
	EInvalidRequest        = "INVALID_REQUEST"
	EUnsupportedSchema     = "UNSUPPORTED_SCHEMA"
	EInvalidMaxDepth       = "INVALID_MAX_DEPTH"
	EDepthExceeded         = "DEPTH_EXCEEDED"
	EDuplicateChild        = "DUPLICATE_CHILD"
	ENotResumable          = "NOT_RESUMABLE"
	ESteerRejected         = "STEER_REJECTED"
	EForbidden             = "FORBIDDEN" // the 403 code
	EUnauthenticated       = "UNAUTHENTICATED"
	ERateLimited           = "RATE_LIMITED"
	EPayloadTooLarge       = "PAYLOAD_TOO_LARGE"
	EDraining              = "DRAINING"
	EAborted               = "ABORTED"
	// EDisposed: the continuable child or root session was disposed
	// (DELETE /v1/subagents/{childId}, DELETE /v1/sessions/{id}); it takes
	// no more followups or prompts.
	EDisposed = "DISPOSED"
	// EActivationClosing: the reporting child's activation already began
	// to settle.
	EActivationClosing = "ACTIVATION_CLOSING"
	// EParentUnavailable: the reporting child's durable parent is gone, or
	// the delivery to it failed.
	EParentUnavailable = "PARENT_UNAVAILABLE"
	// EAgentUnavailable: an external agent could not be started, or failed
	// its handshake; the message says why.
	EAgentUnavailable = "AGENT_UNAVAILABLE"
	// EApprovalNotFound: no approval with that id in the tenant.
	EApprovalNotFound = "APPROVAL_NOT_FOUND"
	// EAlreadyDecided: the approval was closed already (decided, expired
	// or cancelled); the first decision won.
	EAlreadyDecided = "ALREADY_DECIDED"
	// EOptionUnavailable: the agent offered no option that the decision
	// names or maps onto.
	EOptionUnavailable = "OPTION_UNAVAILABLE"
	// EBudgetExhausted: the tree spent its tokenBudget; it is paused
	// until the budget is raised.
	EBudgetExhausted = "BUDGET_EXHAUSTED"
	// EDeadlineExceeded: the tree's deadline passed.
	EDeadlineExceeded = "DEADLINE_EXCEEDED"
	// ELimitExceeded: the parent already has its tree's maxChildren
	// children.
	ELimitExceeded = "LIMIT_EXCEEDED"
	EInternal      = "INTERNAL"
)

// Error is an error whose Code and Message may be shown to API clients. Any
// other error is internal: it is logged and reported as "internal error".
type Error struct {
	Code    string
	Message string
	// Fields holds per-field messages for EInvalidRequest, keyed by a JSON
	// path such as "outputSchema.properties.a".
	Fields map[string]string
	Err    error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, or EInternal.
func ErrorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage returns the client-safe message of err: the *Error's message,
// or "internal error" for anything else.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// controlCodec carries an *Error across replicas in control answers
// (resident.Control): the requester returns the error its client would
// have had from the replica that carried the request out.
var controlCodec = resident.Codec{
	Encode: func(err error) (resident.WireError, bool) {
		var e *Error
		if !errors.As(err, &e) {
			return resident.WireError{}, false
		}
		return resident.WireError{Code: e.Code, Message: e.Message, Fields: e.Fields}, true
	},
	Decode: func(w resident.WireError) error {
		return &Error{Code: w.Code, Message: w.Message, Fields: w.Fields}
	},
	Abort: func(cause error, message string) error {
		return &Error{Code: EAborted, Err: cause, Message: message}
	},
}
