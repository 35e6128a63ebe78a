package http

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/subagentd/subagentd/internal/resident"
	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// Codes of the HTTP layer itself, beside the seam's (subagent.E…).
const (
	codeNotFound         = "NOT_FOUND"
	codeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	codeNotReady         = "NOT_READY"
	// codeUnavailable: the store did not answer (unreachable, or past its
	// call bound); the request may be retried.
	codeUnavailable = "UNAVAILABLE"
	// codeLeaseLost: the replica that carried out the request lost the
	// resident agent's lease to another replica half-way (store.ErrFenced);
	// the retry reaches the new owner.
	codeLeaseLost = "LEASE_LOST"
)

// unavailableRetry is the Retry-After of a 503.
const unavailableRetry = 2 * time.Second

// problemType is what a code means on the wire.
type problemType struct {
	status int
	title  string
}

// problems is the one code → status table (docs/architecture.md §8). A code missing here
// is a bug and is answered as INTERNAL.
var problems = map[string]problemType{
	subagent.ENoProvider:            {http.StatusNotFound, "No such provider"},
	subagent.EDuplicateProvider:     {http.StatusConflict, "Provider already registered"},
	subagent.ESessionNotFound:       {http.StatusNotFound, "No such session"},
	subagent.ERunNotFound:           {http.StatusNotFound, "No such run"},
	subagent.ETaskNotFound:          {http.StatusNotFound, "No such task"},
	webhooks.ENotFound:              {http.StatusNotFound, "No such webhook"},
	webhooks.EDeliveryNotFound:      {http.StatusNotFound, "No such delivery"},
	webhooks.ETooMany:               {http.StatusConflict, "Too many webhooks"},
	webhooks.EPushNotFound:          {http.StatusNotFound, "No such push config"},
	codeNotFound:                    {http.StatusNotFound, "Not found"},
	codeMethodNotAllowed:            {http.StatusMethodNotAllowed, "Method not allowed"},
	subagent.EUnsupportedCapability: {http.StatusUnprocessableEntity, "Unsupported capability"},
	subagent.EInvalidRequest:        {http.StatusBadRequest, "Invalid request"},
	subagent.EUnsupportedSchema:     {http.StatusUnprocessableEntity, "Unsupported output schema"},
	subagent.EInvalidMaxDepth:       {http.StatusUnprocessableEntity, "Invalid maxDepth"},
	roots.EUnknownRoute:             {http.StatusUnprocessableEntity, "Unknown model route"},
	subagent.EDepthExceeded:         {http.StatusUnprocessableEntity, "Delegation depth exceeded"},
	subagent.EDuplicateChild:        {http.StatusConflict, "Child already exists"},
	subagent.ENotResumable:          {http.StatusConflict, "Child not resumable"},
	subagent.EDisposed:              {http.StatusConflict, "Disposed"},
	subagent.ESteerRejected:         {http.StatusConflict, "Steer rejected"},
	subagent.EActivationClosing:     {http.StatusConflict, "Activation closing"},
	subagent.EParentUnavailable:     {http.StatusConflict, "Parent unavailable"},
	subagent.EForbidden:             {http.StatusForbidden, "Forbidden"},
	subagent.EUnauthenticated:       {http.StatusUnauthorized, "Unauthenticated"},
	subagent.ERateLimited:           {http.StatusTooManyRequests, "Rate limited"},
	subagent.EPayloadTooLarge:       {http.StatusRequestEntityTooLarge, "Payload too large"},
	codeUnsupportedMediaType:        {http.StatusUnsupportedMediaType, "Unsupported media type"},
	codeIdempotencyReused:           {http.StatusUnprocessableEntity, "Idempotency key reused"},
	codeIdempotencyInUse:            {http.StatusConflict, "Idempotency key in use"},
	subagent.EDraining:              {http.StatusServiceUnavailable, "Draining"},
	codeLeaseLost:                   {http.StatusServiceUnavailable, "Lease lost"},
	codeNotReady:                    {http.StatusServiceUnavailable, "Not ready"},
	codeUnavailable:                 {http.StatusServiceUnavailable, "Unavailable"},
	subagent.EAgentUnavailable:      {http.StatusBadGateway, "Agent unavailable"},
	subagent.EApprovalNotFound:      {http.StatusNotFound, "No such approval"},
	subagent.EAlreadyDecided:        {http.StatusConflict, "Already decided"},
	subagent.EOptionUnavailable:     {http.StatusUnprocessableEntity, "Option unavailable"},
	subagent.EBudgetExhausted:       {http.StatusConflict, "Budget exhausted"},
	subagent.EDeadlineExceeded:      {http.StatusConflict, "Deadline exceeded"},
	subagent.ELimitExceeded:         {http.StatusConflict, "Limit exceeded"},
	// ABORTED: a start was cancelled before its child was published
	// (gRPC's Aborted → 409, as in ardanlabs' table).
	subagent.EAborted:  {http.StatusConflict, "Aborted"},
	subagent.EInternal: {http.StatusInternalServerError, "Internal error"},
}

// problem is an RFC 9457 problem detail with a stable code.
type problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail"`
	Code   string       `json:"code"`
	Errors []fieldError `json:"errors,omitempty"`
}

// fieldError is one invalid field of a request.
type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// writeError is the one writer of error responses: the problem of err
// (see problemOf), as problem+json. An error caused by the client going
// away is logged at Debug and not answered.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	req := slog.Group("request", slog.String("method", r.Method), slog.String("uri", r.URL.RequestURI()))
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		s.log.DebugContext(r.Context(), "request ended by the client", req, slog.Any("error", err))
		return
	}
	p := s.problemOf(r.Context(), err, req)
	switch p.Code {
	case subagent.EUnauthenticated:
		// RFC 6750 §3: a 401 names the scheme it wants.
		w.Header().Set("WWW-Authenticate", `Bearer realm="subagentd"`)
	case subagent.ERateLimited:
		wait := time.Second
		if le := (*limitedError)(nil); errors.As(err, &le) {
			wait = le.retryAfter
		}
		w.Header().Set("Retry-After", retryAfter(wait))
	}
	if p.Status == http.StatusServiceUnavailable {
		// DRAINING, NOT_READY, UNAVAILABLE, LEASE_LOST: another replica, or this one
		// in a moment, can serve the retry.
		w.Header().Set("Retry-After", retryAfter(unavailableRetry))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	if err := json.NewEncoder(w).Encode(p); err != nil {
		s.log.DebugContext(r.Context(), "write problem", req, slog.Any("error", err))
	}
}

// problemOf is the one translation of an error into what a client sees,
// for every face. A *subagent.Error shows its code, message and fields;
// anything else is INTERNAL with the detail "internal error" (or
// UNAVAILABLE, LEASE_LOST for the store's retryable failures), and the
// real error is only logged. 4xx are logged at Warn, 5xx at Error, with
// source saying what was asked.
func (s *Server) problemOf(ctx context.Context, err error, source slog.Attr) problem {
	code, detail := subagent.ErrorCode(err), subagent.ErrorMessage(err)
	switch {
	case code != subagent.EInternal:
	case errors.Is(err, store.ErrUnavailable):
		code, detail = codeUnavailable, "the database is unreachable or did not answer in time; retry later"
	case errors.Is(err, store.ErrInvalid):
		// The store refused the request's data (text Postgres does not
		// keep, say) that the edge checks let through.
		code, detail = subagent.EInvalidRequest, "the request holds data the store refuses: text that is not UTF-8, a NUL character or an oversized value"
	case errors.Is(err, store.ErrFenced):
		code, detail = codeLeaseLost, "another replica took this agent over while the request ran; retry"
	case errors.Is(err, resident.ErrHeldByOtherKind):
		// A session is a root or a child: the request named the other kind
		// while this process drives the session as its own kind.
		code, detail = subagent.EInvalidRequest, "the session is live here as another kind (a root session, or a continuable child) than this request addresses"
	}
	pt, ok := problems[code]
	if !ok {
		s.log.ErrorContext(ctx, "error code has no status", slog.String("code", code))
		code, pt = subagent.EInternal, problems[subagent.EInternal]
	}
	p := problem{
		Type:   "urn:subagentd:problem:" + strings.ToLower(strings.ReplaceAll(code, "_", "-")),
		Title:  pt.title,
		Status: pt.status,
		Detail: detail,
		Code:   code,
	}
	var se *subagent.Error
	if code != subagent.EInternal && errors.As(err, &se) {
		p.Errors = sortedFields(se.Fields)
	}
	if code == subagent.EInternal {
		p.Detail = "internal error"
	}
	s.metrics.errors.WithLabelValues(code).Inc()
	resp := slog.Group("response", slog.Int("status_code", pt.status), slog.String("code", code))
	if pt.status >= 500 {
		s.log.ErrorContext(ctx, "request failed", source, resp, slog.Any("error", err))
	} else {
		s.log.WarnContext(ctx, "request rejected", source, resp, slog.String("detail", p.Detail))
	}
	return p
}

// sortedFields lists fields ordered by field name, so answers are stable.
func sortedFields(fields map[string]string) []fieldError {
	if len(fields) == 0 {
		return nil
	}
	out := make([]fieldError, 0, len(fields))
	for f, m := range fields {
		out = append(out, fieldError{Field: f, Message: m})
	}
	slices.SortFunc(out, func(a, b fieldError) int { return strings.Compare(a.Field, b.Field) })
	return out
}

// invalid returns an INVALID_REQUEST error listing fields; the detail names
// them, so a client that ignores `errors` still learns what was wrong.
func invalid(fields map[string]string) error {
	list := sortedFields(fields)
	parts := make([]string, len(list))
	for i, f := range list {
		parts[i] = f.Field + ": " + f.Message
	}
	return &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid request: " + strings.Join(parts, "; "), Fields: fields}
}
