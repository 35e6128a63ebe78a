package http

import (
	"net/http"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// createSubagent starts a continuable child and answers 201 once its
// prompt is durably accepted, before any model request (seam-spec R57).
// The request's cancellation counts only until acceptance (R61): the child
// outlives the request. Each activation is a task; the answer names the
// first.
func (s *Server) createSubagent(w http.ResponseWriter, r *http.Request) error {
	conts, err := s.continuations()
	if err != nil {
		return err
	}
	var req createSubagentRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	parent, err := s.session(r.Context(), req.ParentSessionID)
	if err != nil {
		return err
	}
	started, err := conts.StartContinuable(r.Context(), req.seam(parent))
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/subagents/"+started.ChildID)
	s.writeJSON(w, r, http.StatusCreated, createSubagentResponse{ChildID: started.ChildID, TaskID: started.TaskID, MessageID: started.MessageID})
	return nil
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
// its durable parent and answers where it went: steered into the running
// turn (once a model step admitted it) or started as a new task that
// cold-resumed the child. Content that cannot be delivered is an error,
// never a result; bad input (unknown child, wrong parent, a child that
// cannot be resumed) is rejected before anything is stored. When the
// client goes away first, the accepted message is still delivered.
func (s *Server) followupSubagent(w http.ResponseWriter, r *http.Request) error {
	conts, childID, err := s.childRoute(r)
	if err != nil {
		return err
	}
	var req followupRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	res, err := conts.Followup(r.Context(), req.ParentSessionID, childID, req.Content, req.source())
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, followupResponse{Route: res.Route, TaskID: res.TaskID, MessageID: res.MessageID})
	return nil
}

// interruptSubagent stops the current turn of a continuable child (user
// authority: the caller names the child's durable parent) and answers 202
// before the turn has unwound. Messages not yet admitted stay parked and
// run first when the next followup starts the child. A child that is not
// running is an accepted no-op.
func (s *Server) interruptSubagent(w http.ResponseWriter, r *http.Request) error {
	conts, childID, err := s.childRoute(r)
	if err != nil {
		return err
	}
	var req interruptRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if err := conts.Interrupt(r.Context(), req.ParentSessionID, childID); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusAccepted, acceptedJSON{Accepted: true})
	return nil
}

// getTask answers the activation run of a task: its state and, once
// settled, its result. ?wait=N long-polls up to N seconds for a running
// activation to settle.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	taskID := p.id("taskId")
	wait := time.Duration(p.int("wait", 0, 0, int64(s.maxWait/time.Second))) * time.Second
	if err := p.err(); err != nil {
		return err
	}
	conts, err := s.continuations()
	if err != nil {
		return err
	}
	run, err := conts.Task(r.Context(), taskID)
	if err != nil {
		return err
	}
	if run.State == store.StateRunning && wait > 0 {
		if run, err = s.awaitRun(r.Context(), run.ID, wait); err != nil {
			return err
		}
	}
	s.writeJSON(w, r, http.StatusOK, runOut(run))
	return nil
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
