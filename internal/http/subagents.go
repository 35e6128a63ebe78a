package http

import (
	"context"
	"net/http"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// createSubagent starts a continuable child and answers 201 once its
// prompt is durably accepted (see startSubagent).
func (s *Server) createSubagent(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.continuations(); err != nil {
		return err
	}
	var req createSubagentRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	out, err := s.startSubagent(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/subagents/"+out.ChildID)
	s.writeJSON(w, r, http.StatusCreated, out)
	return nil
}

// startSubagent starts the continuable child req asks for and returns once
// its prompt is durably accepted, before any model request
// (R57). ctx's cancellation counts only until acceptance (R61): the child
// outlives the request. Each activation is a task; the answer names the
// first.
func (s *Server) startSubagent(ctx context.Context, req createSubagentRequest) (createSubagentResponse, error) {
	conts, err := s.continuations()
	if err != nil {
		return createSubagentResponse{}, err
	}
	parent, err := s.session(ctx, req.ParentSessionID)
	if err != nil {
		return createSubagentResponse{}, err
	}
	started, err := conts.StartContinuable(ctx, req.seam(parent))
	if err != nil {
		return createSubagentResponse{}, err
	}
	return createSubagentResponse{ChildID: started.ChildID, TaskID: started.TaskID, MessageID: started.MessageID}, nil
}

// getSubagent answers a child's header, identity, activity and task,
// without loading or resuming it.
func (s *Server) getSubagent(w http.ResponseWriter, r *http.Request) error {
	conts, childID, err := s.childRoute(r)
	if err != nil {
		return err
	}
	info, err := conts.Child(r.Context(), childID)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, subagentOut(info))
	return nil
}

// followupSubagent delivers content to a continuable child on behalf of
// its durable parent and answers where it went (see followup); with
// Prefer: respond-async it answers 202 once the content is accepted (see
// followupAsync).
func (s *Server) followupSubagent(w http.ResponseWriter, r *http.Request) error {
	_, childID, err := s.childRoute(r)
	if err != nil {
		return err
	}
	var req followupRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if preferAsync(r.Header.Get("Prefer")) {
		out, err := s.followupAsync(r.Context(), childID, req)
		if err != nil {
			return err
		}
		w.Header().Set("Preference-Applied", respondAsync)
		s.writeJSON(w, r, http.StatusAccepted, out)
		return nil
	}
	out, err := s.followup(r.Context(), childID, req)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// followupAsync accepts req's content for continuable child childID and
// returns once it is stored in the child's durable inbox, on the replica
// that drives the child; its route follows as lifecycle event
// message/routed. Bad input is rejected as followup rejects it.
func (s *Server) followupAsync(ctx context.Context, childID string, req followupRequest) (followupAcceptedResponse, error) {
	conts, err := s.continuations()
	if err != nil {
		return followupAcceptedResponse{}, err
	}
	id, err := conts.FollowupAsync(ctx, req.ParentSessionID, childID, req.Content, req.source())
	if err != nil {
		return followupAcceptedResponse{}, err
	}
	return followupAcceptedResponse{MessageID: id, ChildID: childID, Route: routeAccepted}, nil
}

// followup delivers req's content to continuable child childID: steered
// into the running turn (once a model step admitted it) or started as a
// new task that cold-resumed the child. Content that cannot be delivered
// is an error, never a result; bad input (unknown child, wrong parent, a
// child that cannot be resumed) is rejected before anything is stored.
// When the caller goes away first, the accepted message is still
// delivered.
func (s *Server) followup(ctx context.Context, childID string, req followupRequest) (followupResponse, error) {
	conts, err := s.continuations()
	if err != nil {
		return followupResponse{}, err
	}
	res, err := conts.Followup(ctx, req.ParentSessionID, childID, req.Content, req.source())
	if err != nil {
		return followupResponse{}, err
	}
	return followupResponse{Route: res.Route, TaskID: res.TaskID, MessageID: res.MessageID}, nil
}

// interruptSubagent stops the current turn of a continuable child and
// answers 202 before the turn has unwound (see interrupt).
func (s *Server) interruptSubagent(w http.ResponseWriter, r *http.Request) error {
	_, childID, err := s.childRoute(r)
	if err != nil {
		return err
	}
	var req interruptRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	out, err := s.interrupt(r.Context(), childID, req)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusAccepted, out)
	return nil
}

// disposeSubagent disposes a continuable child of ?parentSessionId= and
// answers 204 once its live activation, if any, has settled; again 204
// for a child disposed already.
func (s *Server) disposeSubagent(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	childID := p.id("childId")
	parentID := p.str("parentSessionId", maxIDLength)
	if parentID == "" {
		p.fail("parentSessionId", "required")
	}
	if err := p.err(); err != nil {
		return err
	}
	conts, err := s.continuations()
	if err != nil {
		return err
	}
	if err := conts.Dispose(r.Context(), parentID, childID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// interrupt stops the current turn of continuable child childID (user
// authority: req names the child's durable parent) without waiting for
// the turn to unwind. Messages not yet admitted stay parked and run first
// when the next followup starts the child. A child that is not running is
// an accepted no-op.
func (s *Server) interrupt(ctx context.Context, childID string, req interruptRequest) (acceptedJSON, error) {
	conts, err := s.continuations()
	if err != nil {
		return acceptedJSON{}, err
	}
	if err := conts.Interrupt(ctx, req.ParentSessionID, childID); err != nil {
		return acceptedJSON{}, err
	}
	return acceptedJSON{Accepted: true}, nil
}

// getTask answers the activation run of a task (see task). ?wait=N
// long-polls up to N seconds for a running activation to settle.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	taskID := p.id("taskId")
	wait := time.Duration(p.int("wait", 0, 0, int64(s.maxWait/time.Second))) * time.Second
	if err := p.err(); err != nil {
		return err
	}
	run, err := s.task(r.Context(), taskID, wait)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, runOut(run))
	return nil
}

// task returns the activation run of task taskID: its state and, once
// settled, its result; a running activation is waited for up to wait.
func (s *Server) task(ctx context.Context, taskID string, wait time.Duration) (store.Run, error) {
	conts, err := s.continuations()
	if err != nil {
		return store.Run{}, err
	}
	run, err := conts.Task(ctx, taskID)
	if err != nil || run.State != store.StateRunning || wait <= 0 {
		return run, err
	}
	return s.awaitRun(ctx, run.ID, wait)
}

// childRoute reads the {childId} of a /v1/subagents/{childId}… request and
// the continuation manager that serves it.
func (s *Server) childRoute(r *http.Request) (Continuations, string, error) {
	p := newParams(r)
	childID := p.id("childId")
	if err := p.err(); err != nil {
		return nil, "", err
	}
	conts, err := s.continuations()
	return conts, childID, err
}
