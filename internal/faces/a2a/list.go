package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// Bounds of tasks/list: A2A's own.
const (
	defaultPageSize = 50
	maxPageSize     = 100
)

// listStates are the states tasks/list may filter by.
var listStates = []a2a.TaskState{
	a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired,
	a2a.TaskStateCompleted, a2a.TaskStateCanceled, a2a.TaskStateFailed, a2a.TaskStateRejected,
}

// ListTasks implements a2asrv.RequestHandler: the tasks of context
// req.ContextID, or of every context under the "a2a" root session,
// oldest first, one page of GET /v1/runs (its cursor is the page token,
// so paging is stable while tasks start and settle). A status filter
// keeps the page's tasks in that state: a page may then hold fewer than
// pageSize tasks and still have a next one. Tasks carry no history, and
// artifacts only with includeArtifacts. totalSize is the number of tasks
// of this page: subagentd does not count the rest.
func (h *handler) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	size := req.PageSize
	switch {
	case size == 0:
		size = defaultPageSize
	case size < 0 || size > maxPageSize:
		return nil, a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("pageSize: must be 1 to %d", maxPageSize))
	}
	if req.Status != a2a.TaskStateUnspecified && !slices.Contains(listStates, req.Status) {
		return nil, a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("status: %q is not a task state", req.Status))
	}
	if req.HistoryLength != nil && *req.HistoryLength < 0 {
		return nil, a2a.NewError(a2a.ErrInvalidParams, "historyLength: must not be negative")
	}
	q := url.Values{"limit": {strconv.Itoa(size)}}
	if req.PageToken != "" {
		q.Set("after", req.PageToken)
	}
	if req.ContextID != "" {
		q.Set("childSessionId", req.ContextID)
	} else {
		root, err := h.f.api.FaceRoot(ctx, RootLabel)
		if err != nil {
			return nil, errorOf(ctx, err)
		}
		q.Set("parentSessionId", root)
	}
	if req.Status == a2a.TaskStateWorking {
		q.Set("state", "running")
	}
	raw, err := h.f.api.ListRuns(ctx, q)
	if err != nil {
		return nil, errorOf(ctx, err)
	}
	var page struct {
		Runs       []taskJSON `json:"runs"`
		NextCursor string     `json:"nextCursor"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, errorOf(ctx, fmt.Errorf("decode runs: %w", err))
	}
	out := &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, PageSize: size, NextPageToken: page.NextCursor}
	for _, t := range page.Runs {
		if t.TaskID == "" { // a one-shot run under the a2a root: not a task
			continue
		}
		if err := h.approvals(ctx, &t); err != nil {
			return nil, err
		}
		task := t.task()
		if req.Status != a2a.TaskStateUnspecified && task.Status.State != req.Status {
			continue
		}
		if after := req.StatusTimestampAfter; after != nil && !task.Status.Timestamp.After(*after) {
			continue
		}
		if !req.IncludeArtifacts {
			task.Artifacts = nil
		}
		out.Tasks = append(out.Tasks, task)
	}
	out.TotalSize = len(out.Tasks)
	return out, nil
}
