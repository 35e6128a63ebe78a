package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/subagentd/subagentd/internal/roots"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// The REST API's operations for the service's other faces
// (internal/faces/mcp, internal/faces/a2a). Each makes the domain call of one route after the
// route's own validation of the same request body, and answers the
// route's JSON body, so that a face adds no rule of its own and its
// answers read as the REST ones. ctx carries the tenant (the guard put it
// there). Errors are client-safe *subagent.Error values — problemOf's
// translation, logged as a REST answer's would be — or ctx's error when
// the caller went away.

// ListProviders answers GET /v1/providers.
func (s *Server) ListProviders(ctx context.Context) (json.RawMessage, error) {
	list, err := s.providerList(ctx)
	return answer(ctx, s, "list providers", list, err)
}

// GetProvider answers GET /v1/providers/{name}.
func (s *Server) GetProvider(ctx context.Context, name string) (json.RawMessage, error) {
	if err := checkID("name", name); err != nil {
		return answer(ctx, s, "get provider", providerJSON{}, err)
	}
	out, err := s.provider(ctx, name)
	return answer(ctx, s, "get provider", out, err)
}

// StartRun answers POST /v1/runs with body as its request body, waiting up
// to wait (at most MaxWait) for the run to settle, as Prefer: wait=N does.
func (s *Server) StartRun(ctx context.Context, body []byte, wait time.Duration) (json.RawMessage, error) {
	var req createRunRequest
	if err := s.unmarshal(body, &req); err != nil {
		return answer(ctx, s, "start run", runJSON{}, err)
	}
	run, err := s.startRun(ctx, req, min(wait, s.maxWait))
	return answer(ctx, s, "start run", runOut(run), err)
}

// ListRuns answers GET /v1/runs with query as its query.
func (s *Server) ListRuns(ctx context.Context, query url.Values) (json.RawMessage, error) {
	out, err := s.runPage(ctx, queryParams(query))
	return answer(ctx, s, "list runs", out, err)
}

// GetRun answers GET /v1/runs/{runId}, waiting up to wait (at most
// MaxWait) for a running run to settle, as ?wait=N does.
func (s *Server) GetRun(ctx context.Context, runID string, wait time.Duration) (json.RawMessage, error) {
	if err := checkID("runId", runID); err != nil {
		return answer(ctx, s, "get run", runJSON{}, err)
	}
	run, err := s.awaitRun(ctx, runID, min(wait, s.maxWait))
	return answer(ctx, s, "get run", runOut(run), err)
}

// StartSubagent answers POST /v1/subagents with body as its request body.
func (s *Server) StartSubagent(ctx context.Context, body []byte) (json.RawMessage, error) {
	var req createSubagentRequest
	if err := s.unmarshal(body, &req); err != nil {
		return answer(ctx, s, "start subagent", createSubagentResponse{}, err)
	}
	out, err := s.startSubagent(ctx, req)
	return answer(ctx, s, "start subagent", out, err)
}

// Followup answers POST /v1/subagents/{childId}/followup with body as its
// request body.
func (s *Server) Followup(ctx context.Context, childID string, body []byte) (json.RawMessage, error) {
	req, err := s.followupBody(childID, body)
	if err != nil {
		return answer(ctx, s, "followup", followupResponse{}, err)
	}
	out, err := s.followup(ctx, childID, req)
	return answer(ctx, s, "followup", out, err)
}

// FollowupAsync answers POST /v1/subagents/{childId}/followup with
// Prefer: respond-async and body as its request body.
func (s *Server) FollowupAsync(ctx context.Context, childID string, body []byte) (json.RawMessage, error) {
	req, err := s.followupBody(childID, body)
	if err != nil {
		return answer(ctx, s, "followup", followupAcceptedResponse{}, err)
	}
	out, err := s.followupAsync(ctx, childID, req)
	return answer(ctx, s, "followup", out, err)
}

// followupBody checks a followup's child id and decodes its body.
func (s *Server) followupBody(childID string, body []byte) (followupRequest, error) {
	var req followupRequest
	err := checkID("childId", childID)
	if err == nil {
		err = s.unmarshal(body, &req)
	}
	return req, err
}

// Interrupt answers POST /v1/subagents/{childId}/interrupt with body as
// its request body.
func (s *Server) Interrupt(ctx context.Context, childID string, body []byte) (json.RawMessage, error) {
	var req interruptRequest
	err := checkID("childId", childID)
	if err == nil {
		err = s.unmarshal(body, &req)
	}
	if err != nil {
		return answer(ctx, s, "interrupt", acceptedJSON{}, err)
	}
	out, err := s.interrupt(ctx, childID, req)
	return answer(ctx, s, "interrupt", out, err)
}

// GetTask answers GET /v1/tasks/{taskId}, waiting up to wait (at most
// MaxWait) for a running activation to settle, as ?wait=N does.
func (s *Server) GetTask(ctx context.Context, taskID string, wait time.Duration) (json.RawMessage, error) {
	if err := checkID("taskId", taskID); err != nil {
		return answer(ctx, s, "get task", runJSON{}, err)
	}
	run, err := s.task(ctx, taskID, min(wait, s.maxWait))
	return answer(ctx, s, "get task", runOut(run), err)
}

// CancelTree answers POST /v1/sessions/{id}/cancel.
func (s *Server) CancelTree(ctx context.Context, sessionID string) (json.RawMessage, error) {
	if err := checkID("id", sessionID); err != nil {
		return answer(ctx, s, "cancel tree", treeCancelResponse{}, err)
	}
	out, err := s.cancelTree(ctx, sessionID)
	return answer(ctx, s, "cancel tree", out, err)
}

// ListApprovals answers GET /v1/approvals with query as its query.
func (s *Server) ListApprovals(ctx context.Context, query url.Values) (json.RawMessage, error) {
	out, err := s.approvalPage(ctx, queryParams(query))
	return answer(ctx, s, "list approvals", out, err)
}

// DecideApproval answers POST /v1/approvals/{approvalId}/decision with body
// as its request body.
func (s *Server) DecideApproval(ctx context.Context, approvalID string, body []byte) (json.RawMessage, error) {
	var req decisionRequest
	err := checkID("approvalId", approvalID)
	if err == nil {
		err = s.unmarshal(body, &req)
	}
	if err != nil {
		return answer(ctx, s, "decide approval", approvalJSON{}, err)
	}
	out, err := s.decide(ctx, approvalID, req)
	return answer(ctx, s, "decide approval", out, err)
}

// FollowTask passes each event of task taskID's turns to each, in log
// order, as GET /v1/sessions/{id}/events shows an event: from the
// activation's start — the events its child's log holds already — then
// the ones it appends, until it settled and each got every event it
// logged. It answers GET /v1/tasks/{taskId} as the task then stands:
// settled, or running when the server began shutting down. A settled task
// is replayed whole at once. An error each returns ends the stream and is
// returned as it is.
//
// An activation's events are the child's log entries stamped between its
// run's start and its end: an activation is driven by one replica at a
// time, which stamps both, and no two activations of a child overlap
// (docs/seam.md §12). Each read of the log is followed by a read of the
// run, so an event read before the end was known is still held to it.
func (s *Server) FollowTask(ctx context.Context, taskID string, each func(event json.RawMessage) error) (json.RawMessage, error) {
	if err := checkID("taskId", taskID); err != nil {
		return answer(ctx, s, "follow task", runJSON{}, err)
	}
	var eachErr error
	run, err := s.followTask(ctx, taskID, func(ev json.RawMessage) error {
		eachErr = each(ev)
		return eachErr
	})
	if eachErr != nil {
		return nil, eachErr
	}
	return answer(ctx, s, "follow task", runOut(run), err)
}

func (s *Server) followTask(ctx context.Context, taskID string, each func(json.RawMessage) error) (store.Run, error) {
	task, err := s.task(ctx, taskID, 0)
	if err != nil {
		return store.Run{}, err
	}
	leave, err := s.enter(ctx)
	if err != nil {
		return store.Run{}, err
	}
	defer leave()
	// Subscribe before the first read, so that no commit falls between.
	logWake, stopLog := s.store.Subscribe(store.SessionTopic(task.ChildID))
	defer stopLog()
	endWake, stopEnd := s.store.Subscribe(store.LifecycleTopic)
	defer stopEnd()
	after := int64(-1)
	for {
		evs, err := s.store.Events(ctx, task.ChildID, after, readPage)
		if err != nil {
			return store.Run{}, sessionError(task.ChildID, err)
		}
		cur, err := s.run(ctx, task.ID)
		if err != nil {
			return store.Run{}, err
		}
		ended := cur.State != store.StateRunning
		for _, e := range evs {
			after = e.Seq
			if e.Time.Before(task.StartedAt) || (ended && e.Time.After(cur.EndedAt)) {
				continue
			}
			data, err := json.Marshal(sessionEventOut(e))
			if err != nil {
				return store.Run{}, fmt.Errorf("session %s event %d: %w", task.ChildID, e.Seq, err)
			}
			if err := each(data); err != nil {
				return store.Run{}, err
			}
		}
		switch {
		case len(evs) == readPage:
			continue
		case ended:
			return cur, nil
		}
		select {
		case <-logWake:
		case <-endWake:
		case <-s.done:
			return cur, nil
		case <-ctx.Done():
			return store.Run{}, ctx.Err()
		}
	}
}

// FaceRoot returns the id of ctx's tenant's root session labelled label —
// the parent a face's clients delegate under when they name none —
// creating it on first use, a root like any other (the dashboard lists
// it). Its id is label~tenant: concurrent first calls, on any replica,
// name the same session, and the one that loses the creation race reads
// the winner's. No caller-reserved id (safeID) holds a '~', so no tenant
// can take another's first.
func (s *Server) FaceRoot(ctx context.Context, label string) (string, error) {
	id := label + "~" + store.Tenant(ctx)
	_, err := s.session(ctx, id)
	if subagent.ErrorCode(err) == subagent.ESessionNotFound {
		_, err = s.sessions.Create(ctx, roots.CreateParams{ID: id, Label: label})
		if errors.Is(err, store.ErrConflict) {
			_, err = s.session(ctx, id)
		}
	}
	if err != nil {
		_, err = answer(ctx, s, "root session "+label, "", fmt.Errorf("the %s root session: %w", label, err))
		return "", err
	}
	return id, nil
}

// answer encodes v as an operation's answer, or translates err (see the
// comment at the top of this file).
func answer[T any](ctx context.Context, s *Server, op string, v T, err error) (json.RawMessage, error) {
	if err == nil {
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%s: encode the answer: %w", op, err)
		}
		return data, nil
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, err
	}
	p := s.problemOf(ctx, err, slog.Group("operation", slog.String("name", op)))
	fields := make(map[string]string, len(p.Errors))
	for _, f := range p.Errors {
		fields[f.Field] = f.Message
	}
	return nil, &subagent.Error{Code: p.Code, Message: p.Detail, Fields: fields}
}
