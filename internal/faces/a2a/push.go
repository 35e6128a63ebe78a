package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// PushBody is the body of a push delivery (webhooks.PushBody): what
// a2a-go's push sender posts, a StreamResponse holding the task's status
// update. An approval the task waits on makes it input-required with the
// approval as a data part (its options are the task's, read with
// GetTask). The same event builds the same bytes: a retry resends them.
func PushBody(e webhooks.PushEvent) ([]byte, error) {
	t := taskJSON{TaskID: e.TaskID, ChildSessionID: e.ContextID, State: "running", StartedAt: e.At}
	switch {
	case e.StopReason != "":
		t.State, t.EndedAt, t.Result = "settled", &e.At, &resultJSON{StopReason: e.StopReason}
	case e.Approval != nil:
		t.PendingApprovals = 1
		t.approvals = []approvalPart{{ApprovalID: e.Approval.ID,
			ToolCall: approvalToolCall{ID: e.Approval.ToolCallID, Title: e.Approval.Title, Kind: e.Approval.ToolKind}, Options: []approvalOption{}}}
	}
	st := t.status()
	if st.Message != nil {
		st.Message.ID = e.TaskID + "/" + e.StopReason
		if e.Approval != nil {
			st.Message.ID = e.TaskID + "/" + e.Approval.ID
		}
	}
	b, err := json.Marshal(a2a.StreamResponse{Event: &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(e.TaskID), ContextID: e.ContextID, Status: st}})
	if err != nil {
		return nil, fmt.Errorf("a2a: encode a push payload: %w", err)
	}
	return b, nil
}

// errNoPush answers the push-notification methods of a face without
// Config.Push: the card says pushNotifications false.
var errNoPush = a2a.NewError(a2a.ErrPushNotificationNotSupported, "push notifications are not supported; follow a task with SubscribeToTask")

// pushError logs an error of the push service that is not a client's
// (a store that failed) and maps it as errorOf does.
func (h *handler) pushError(ctx context.Context, op string, err error) error {
	if subagent.ErrorCode(err) == subagent.EInternal && ctx.Err() == nil && h.f.log != nil {
		h.f.log.ErrorContext(ctx, "a2a: "+op, slog.Any("error", err))
	}
	return errorOf(ctx, err)
}

// pushConfig is endpoint w as the A2A config it is.
func pushConfig(w store.Webhook) *a2a.PushConfig {
	c := &a2a.PushConfig{TaskID: a2a.TaskID(w.Push.TaskID), ID: w.Push.ConfigID, URL: w.URL, Token: w.Push.Token}
	if scheme, cred, ok := strings.Cut(w.Push.Authorization, " "); ok {
		c.Auth = &a2a.PushAuthInfo{Scheme: scheme, Credentials: cred}
	}
	return c
}

// CreateTaskPushConfig implements a2asrv.RequestHandler: the config is
// stored for the task, which the tenant must have and which must still
// work (a settled task has no status change left to tell); an id the task
// has a config of already replaces it.
func (h *handler) CreateTaskPushConfig(ctx context.Context, req *a2a.PushConfig) (*a2a.PushConfig, error) {
	if h.f.push == nil {
		return nil, errNoPush
	}
	t, err := h.getTask(ctx, req.TaskID, 0)
	if err != nil {
		return nil, err
	}
	if st := t.state(); st.Terminal() {
		return nil, a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("task %s is %s: it has no status change left to push", t.TaskID, st))
	}
	p := webhooks.PushParams{TaskID: string(req.TaskID), ConfigID: req.ID, URL: req.URL, Token: req.Token}
	if req.Auth != nil {
		p.Scheme, p.Credentials = req.Auth.Scheme, req.Auth.Credentials
	}
	w, err := h.f.push.CreatePush(ctx, p)
	if err != nil {
		return nil, h.pushError(ctx, "create a push config", err)
	}
	return pushConfig(w), nil
}

// GetTaskPushConfig implements a2asrv.RequestHandler.
func (h *handler) GetTaskPushConfig(ctx context.Context, req *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	if h.f.push == nil {
		return nil, errNoPush
	}
	w, err := h.f.push.GetPush(ctx, string(req.TaskID), req.ID)
	if err != nil {
		return nil, h.pushError(ctx, "get a push config", err)
	}
	return pushConfig(w), nil
}

// ListTaskPushConfigs implements a2asrv.RequestHandler: a task has at
// most webhooks.MaxPushPerTask configs, so one page holds them all.
func (h *handler) ListTaskPushConfigs(ctx context.Context, req *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	if h.f.push == nil {
		return nil, errNoPush
	}
	list, err := h.f.push.TaskPush(ctx, string(req.TaskID))
	if err != nil {
		return nil, h.pushError(ctx, "list push configs", err)
	}
	out := &a2a.ListTaskPushConfigResponse{Configs: make([]*a2a.PushConfig, len(list))}
	for i, w := range list {
		out.Configs[i] = pushConfig(w)
	}
	return out, nil
}

// DeleteTaskPushConfig implements a2asrv.RequestHandler.
func (h *handler) DeleteTaskPushConfig(ctx context.Context, req *a2a.DeleteTaskPushConfigRequest) error {
	if h.f.push == nil {
		return errNoPush
	}
	if err := h.f.push.DeletePush(ctx, string(req.TaskID), req.ID); err != nil {
		return h.pushError(ctx, "delete a push config", err)
	}
	return nil
}
