package webhooks

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Push-notification configs are the A2A face's webhook endpoints scoped to
// one task (store.WebhookPush). They are delivered by the same deliverer,
// from the same lifecycle log and cursor, as every endpoint; they differ
// in three ways:
//
//   - an endpoint gets only its task's events — its start and
//     settlement, and each approval its agent waits on (approval/requested:
//     the task needs input) and that approval's close (approval/decided: it
//     works again) — and its body is PushBody's (the A2A face's push
//     payload) instead of the thin webhook body;
//   - every delivery carries the Authorization header the config names,
//     besides the Standard Webhooks headers; the signing secret is the
//     config's token (whsec_ and the base64 of its bytes), so a receiver
//     that chose the token verifies the signature with it; the token
//     itself is never sent;
//   - once the task's final status is delivered (or failed for good) the
//     endpoint is disabled with reason "settled": a task settles once, so
//     it has nothing left to tell.

// Error codes and bounds of push configs.
const (
	// EPushNotFound: the task has no push config of that id.
	EPushNotFound = "PUSH_CONFIG_NOT_FOUND"
	// MaxPushPerTask bounds a task's push configs.
	MaxPushPerTask = 10
	// MaxPushID bounds a config id; MaxPushCredential an authorization's
	// credentials and a token; MaxPushScheme an authorization's scheme.
	MaxPushID         = 128
	MaxPushCredential = 4096
	MaxPushScheme     = 64
	// settledReason disables a push endpoint whose task's final status
	// was delivered.
	settledReason = "settled"
)

// pushEvents are the event types every push endpoint takes, of its own
// task only (takes).
var pushEvents = []string{ApprovalDecided, ApprovalRequested, TaskSettled, TaskStarted}

// PushParams is a push config to store for a task.
type PushParams struct {
	TaskID string
	// ConfigID names the config among the task's; "" gets a new id. A
	// config of an id the task has already replaces it.
	ConfigID string
	URL      string
	// Scheme and Credentials make the Authorization header of every
	// delivery ("Scheme Credentials"); both "" for none.
	Scheme, Credentials string
	// Token is the config's token: the signing key of its deliveries.
	Token string
}

// PushEvent is what one push delivery reports: a status change of a task.
type PushEvent struct {
	TaskID string
	// ContextID is the task's child (the A2A context).
	ContextID string
	// StopReason is "" while the task works, else how it settled.
	StopReason string
	// Approval, when set, is the approval the task's agent now waits on:
	// the task needs input. Decided says that an approval closed: the
	// task works again.
	Approval *PushApproval
	Decided  bool
	At       time.Time
}

// PushApproval is the approval a push delivery reports, as the lifecycle
// log carries it.
type PushApproval struct {
	ID                          string
	ToolCallID, Title, ToolKind string
}

// PushBody builds the body of a push delivery; the same event must build
// the same bytes (a retry resends them).
type PushBody func(PushEvent) ([]byte, error)

var (
	pushIDRE = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)
	// schemeRE is an HTTP auth scheme (RFC 9110 token); credentialsRE
	// visible ASCII and inner spaces, so the header cannot be split.
	schemeRE      = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	credentialsRE = regexp.MustCompile(`^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$`)
)

// invalid is INVALID_REQUEST naming field.
func invalid(field, msg string) error {
	return &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid request: " + field + ": " + msg,
		Fields: map[string]string{field: msg}}
}

// checkPush reports bad push input as INVALID_REQUEST with the field
// named.
func checkPush(p PushParams) error {
	var errs []error
	if p.TaskID == "" {
		errs = append(errs, invalid("taskId", "is required"))
	}
	if p.ConfigID != "" && (len(p.ConfigID) > MaxPushID || !pushIDRE.MatchString(p.ConfigID)) {
		errs = append(errs, invalid("id", fmt.Sprintf("must be 1 to %d letters, digits, '.', '_', ':' or '-'", MaxPushID)))
	}
	switch {
	case p.Scheme == "" && p.Credentials == "":
	case len(p.Scheme) > MaxPushScheme || !schemeRE.MatchString(p.Scheme):
		errs = append(errs, invalid("authentication.scheme", fmt.Sprintf("must be an HTTP authentication scheme of at most %d characters", MaxPushScheme)))
	case len(p.Credentials) > MaxPushCredential || !credentialsRE.MatchString(p.Credentials):
		errs = append(errs, invalid("authentication.credentials", fmt.Sprintf("must be 1 to %d visible ASCII characters (inner spaces allowed)", MaxPushCredential)))
	}
	if len(p.Token) > MaxPushCredential || !utf8.ValidString(p.Token) || strings.ContainsRune(p.Token, 0) {
		errs = append(errs, invalid("token", fmt.Sprintf("must be valid UTF-8 without NUL, at most %d bytes", MaxPushCredential)))
	}
	return errors.Join(append(errs, checkURL(p.URL))...)
}

// CreatePush stores a push config for task p.TaskID (the caller checked
// that the tenant has the task) and returns it. It receives only events
// committed after it. Returns INVALID_REQUEST, TOO_MANY_WEBHOOKS (the task
// has MaxPushPerTask configs) or UNSUPPORTED_CAPABILITY (no PushBody).
func (s *Service) CreatePush(ctx context.Context, p PushParams) (store.Webhook, error) {
	if s.pushBody == nil {
		return store.Webhook{}, subagent.Errorf(subagent.EUnsupportedCapability, "push notifications are not configured")
	}
	if err := checkPush(p); err != nil {
		return store.Webhook{}, err
	}
	list, err := s.st.TaskWebhooks(ctx, p.TaskID)
	if err != nil {
		return store.Webhook{}, err
	}
	if p.ConfigID == "" {
		p.ConfigID = newID("pc_")
	}
	if i := slices.IndexFunc(list, func(w store.Webhook) bool { return w.Push.ConfigID == p.ConfigID }); i >= 0 {
		if err := s.st.DeleteWebhook(ctx, list[i].ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return store.Webhook{}, err
		}
	} else if len(list) >= MaxPushPerTask {
		return store.Webhook{}, subagent.Errorf(ETooMany, "a task may have at most %d push notification configs", MaxPushPerTask)
	}
	secret := newSecret()
	if p.Token != "" {
		secret = secretPrefix + base64.StdEncoding.EncodeToString([]byte(p.Token))
	}
	auth := ""
	if p.Scheme != "" {
		auth = p.Scheme + " " + p.Credentials
	}
	w, err := s.st.CreateWebhook(ctx, store.Webhook{
		ID: newID("wh_"), URL: p.URL, Events: pushEvents, Enabled: true, Secret: secret, CreatedAt: time.Now(),
		Push: &store.WebhookPush{TaskID: p.TaskID, ConfigID: p.ConfigID, Authorization: auth, Token: p.Token},
	})
	if errors.Is(err, store.ErrConflict) {
		return store.Webhook{}, &subagent.Error{Code: subagent.EInvalidRequest, Err: err,
			Message: fmt.Sprintf("invalid request: id: task %s got another config %q at the same time", p.TaskID, p.ConfigID)}
	}
	return w, err
}

// TaskPush returns task taskID's push configs, oldest first.
func (s *Service) TaskPush(ctx context.Context, taskID string) ([]store.Webhook, error) {
	return s.st.TaskWebhooks(ctx, taskID)
}

// GetPush returns push config configID of task taskID. Returns
// PUSH_CONFIG_NOT_FOUND.
func (s *Service) GetPush(ctx context.Context, taskID, configID string) (store.Webhook, error) {
	list, err := s.st.TaskWebhooks(ctx, taskID)
	if err != nil {
		return store.Webhook{}, err
	}
	for _, w := range list {
		if w.Push.ConfigID == configID {
			return w, nil
		}
	}
	return store.Webhook{}, subagent.Errorf(EPushNotFound, "task %s has no push notification config %q", taskID, configID)
}

// DeletePush removes push config configID of task taskID and its delivery
// log. Returns PUSH_CONFIG_NOT_FOUND.
func (s *Service) DeletePush(ctx context.Context, taskID, configID string) error {
	w, err := s.GetPush(ctx, taskID, configID)
	if err != nil {
		return err
	}
	err = s.st.DeleteWebhook(ctx, w.ID)
	if errors.Is(err, store.ErrNotFound) {
		return subagent.Errorf(EPushNotFound, "task %s has no push notification config %q", taskID, configID)
	}
	return err
}

// takes reports whether endpoint w takes event ev: one of its types and,
// for a push endpoint, of its task.
func takes(w store.Webhook, ev event) bool {
	if w.Push != nil && ev.taskID != w.Push.TaskID {
		return false
	}
	return slices.Contains(w.Events, ev.typ)
}

// approvalEvent is the part of an approval's lifecycle payload a push
// delivery reports.
type approvalEvent struct {
	ApprovalID string `json:"approvalId"`
	SessionID  string `json:"sessionId"`
	ToolCall   struct {
		ID    string `json:"id"`
		Title string `json:"title"`
		Kind  string `json:"kind"`
	} `json:"toolCall"`
}

// body builds the payload of lifecycle event le, as ev, for endpoint w:
// the thin webhook body, or a push endpoint's PushBody.
func (s *Service) body(ctx context.Context, w store.Webhook, le store.LifecycleEvent, ev event) ([]byte, error) {
	if w.Push == nil {
		return s.lifecycleBody(ctx, le, ev)
	}
	pe := PushEvent{TaskID: ev.taskID, ContextID: ev.data.SessionID, StopReason: ev.data.StopReason, At: le.Time}
	if ev.typ == ApprovalRequested || ev.typ == ApprovalDecided {
		var a approvalEvent
		if err := json.Unmarshal(le.Payload, &a); err != nil {
			return nil, fmt.Errorf("webhooks: decode approval event %d: %w", le.ID, err)
		}
		pe.ContextID, pe.Decided = a.SessionID, ev.typ == ApprovalDecided
		if !pe.Decided {
			pe.Approval = &PushApproval{ID: a.ApprovalID, ToolCallID: a.ToolCall.ID, Title: a.ToolCall.Title, ToolKind: a.ToolCall.Kind}
		}
	}
	b, err := s.pushBody(pe)
	if err != nil {
		return nil, fmt.Errorf("webhooks: build a push payload: %w", err)
	}
	return b, nil
}
