package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// createSession creates a root session with a fresh id.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	var req createSessionRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	stored, err := s.sessions.Create(r.Context(), req.params(uuid.NewString()))
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sessions/"+stored.ID)
	out := sessionOut(stored, false)
	out.Limits = limitsOut(stored.Limits)
	s.writeJSON(w, r, http.StatusCreated, out)
	return nil
}

// listSessions pages through sessions, oldest first, optionally only the
// children of one session or only roots.
func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	parentID := p.str("parentSessionId", maxIDLength)
	root := p.bool("root")
	after := p.str("after", maxIDLength)
	limit := p.limit()
	q := searchQuery(p)
	if parentID != "" && root {
		p.fail("root", "cannot be combined with parentSessionId")
	}
	if err := p.err(); err != nil {
		return err
	}
	f := store.SessionFilter{AfterID: after, Limit: limit}
	switch {
	case parentID != "":
		f.ParentID = &parentID
	case root:
		f.ParentID = new(string)
	}
	if q != "" {
		return s.searchSessions(w, r, q, f)
	}
	rows, next, err := page(r.Context(), limit, func(ctx context.Context, after string, n int) ([]store.Session, error) {
		f.AfterID, f.Limit = after, n
		return s.store.ListSessions(ctx, f)
	}, after, func(x store.Session) string { return x.ID })
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	working, err := s.sessions.Activity(r.Context(), rows)
	if err != nil {
		return err
	}
	out := sessionListJSON{Sessions: make([]sessionJSON, 0, len(rows)), NextCursor: next}
	for _, row := range rows {
		out.Sessions = append(out.Sessions, sessionOut(row, working[row.ID]))
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// getSession answers one header with its activity.
func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	if err := p.err(); err != nil {
		return err
	}
	v, err := s.sessions.Get(r.Context(), id)
	if err != nil {
		return sessionError(id, err)
	}
	out := sessionOut(v.Session, v.Running)
	if v.Limits != nil {
		out.Limits = limitsOut(*v.Limits)
	}
	out.Approvals = policyOut(v.Approvals)
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// maxSeqParam is the largest before a client may pass: 2^53-1, the largest
// integer a JSON number holds exactly, so a client reading the end of a log
// can pass it to mean "the end".
const maxSeqParam = 1<<53 - 1

// listSessionEvents answers one page of a session's log: forwards from
// after, or with before the last page before that seq, so that a reader can
// start from the end of a long log and page back.
func (s *Server) listSessionEvents(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	after := p.int("after", -1, -1, 1<<62)
	before := p.int("before", -1, 0, maxSeqParam)
	backwards := p.query.Has("before")
	if backwards && p.query.Has("after") {
		p.fail("before", "must not be given with after")
	}
	limit := p.limit()
	if err := p.err(); err != nil {
		return err
	}
	var page []store.Event
	var hasMore bool
	var err error
	if backwards {
		page, hasMore, err = s.eventsBefore(r.Context(), id, before, limit)
	} else {
		page, hasMore, err = s.eventsAfter(r.Context(), id, after, limit)
	}
	if err != nil {
		return sessionError(id, err)
	}
	out := sessionEventPageJSON{Events: make([]sessionEventJSON, 0, len(page)), HasMore: hasMore}
	for _, e := range page {
		out.Events = append(out.Events, sessionEventOut(e))
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// eventsAfter reads up to limit events after seq after, and whether later
// ones exist.
func (s *Server) eventsAfter(ctx context.Context, id string, after int64, limit int) ([]store.Event, bool, error) {
	evs, err := s.store.Events(ctx, id, after, limit)
	if err != nil || len(evs) < limit {
		return evs, false, err
	}
	more, err := s.store.Events(ctx, id, evs[len(evs)-1].Seq, 1)
	return evs, len(more) > 0, err
}

// eventsBefore reads the last limit events before seq before, and whether
// earlier ones exist: a log's seqs start at 0 without gaps, so they do
// unless the page starts at 0.
func (s *Server) eventsBefore(ctx context.Context, id string, before int64, limit int) ([]store.Event, bool, error) {
	evs, err := s.store.EventsBefore(ctx, id, before, limit)
	return evs, len(evs) > 0 && evs[0].Seq > 0, err
}

// listSessionChildren answers the direct subagent children of a session
// (docs/seam.md §19), from durable headers and descriptors, without loading
// or resuming anything. Unlike the seam's listChildren (R129), an unknown
// session is SESSION_NOT_FOUND, as on every /v1/sessions/{id} route.
// Children whose identity cannot be read are diagnostic entries.
func (s *Server) listSessionChildren(w http.ResponseWriter, r *http.Request) error {
	return s.listEntries(w, r, Continuations.Children)
}

// listSessionDescendants answers every subagent below a session in
// pre-order, each with its durable parent and its depth below the session.
func (s *Server) listSessionDescendants(w http.ResponseWriter, r *http.Request) error {
	return s.listEntries(w, r, Continuations.Descendants)
}

// listEntries answers one page of the listing list makes of session {id}.
// The cursor is the id of the last entry of the previous page.
func (s *Server) listEntries(w http.ResponseWriter, r *http.Request, list func(c Continuations, ctx context.Context, id string) ([]children.ListEntry, error)) error {
	p := newParams(r)
	id := p.id("id")
	after := p.str("after", maxIDLength)
	limit := p.limit()
	if err := p.err(); err != nil {
		return err
	}
	conts, err := s.continuations()
	if err != nil {
		return err
	}
	if _, err := s.session(r.Context(), id); err != nil {
		return err
	}
	entries, err := list(conts, r.Context(), id)
	if err != nil {
		return fmt.Errorf("list subagents of %s: %w", id, err)
	}
	from := 0
	if after != "" {
		i := slices.IndexFunc(entries, func(e children.ListEntry) bool { return e.ID == after })
		if i < 0 {
			return invalid(map[string]string{"after": "is not a known cursor"})
		}
		from = i + 1
	}
	rows := entries[from:min(from+limit, len(entries))]
	out := childListJSON{Entries: make([]childEntryJSON, 0, len(rows))}
	for _, e := range rows {
		out.Entries = append(out.Entries, childEntryOut(e))
	}
	if from+limit < len(entries) {
		out.NextCursor = rows[len(rows)-1].ID
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// promptSession runs content as the next turn of a root session's own
// agent and answers 202 once the message is durably accepted; the turn
// streams on /v1/sessions/{id}/stream. A child session is INVALID_REQUEST:
// children take followups through /v1/subagents.
func (s *Server) promptSession(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	if err := p.err(); err != nil {
		return err
	}
	if s.roots == nil {
		return subagent.Errorf(codeNotReady, "this server runs no root agents")
	}
	var req promptRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	msgID, err := s.roots.Prompt(r.Context(), id, req.Content)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusAccepted, promptResponse{MessageID: msgID})
	return nil
}

// cancelSession cancels the tree under a session and answers 202
// {cancelled} once what it stopped has settled.
func (s *Server) cancelSession(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	if err := p.err(); err != nil {
		return err
	}
	out, err := s.cancelTree(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusAccepted, out)
	return nil
}

// cancelTree cancels the tree under session id.
func (s *Server) cancelTree(ctx context.Context, id string) (treeCancelResponse, error) {
	if s.trees == nil {
		return treeCancelResponse{}, subagent.Errorf(codeNotReady, "this server runs no tree control")
	}
	n, err := s.trees.Cancel(ctx, id)
	return treeCancelResponse{Cancelled: n}, err
}

// disposeSession disposes a root session's tree and answers 204, again
// for a root disposed already.
func (s *Server) disposeSession(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	if err := p.err(); err != nil {
		return err
	}
	if s.trees == nil {
		return subagent.Errorf(codeNotReady, "this server runs no tree control")
	}
	if err := s.trees.Dispose(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// continuations returns the continuation manager, or NOT_READY when the
// server runs without one.
func (s *Server) continuations() (Continuations, error) {
	if s.conts == nil {
		return nil, subagent.Errorf(codeNotReady, "this server runs no continuation manager")
	}
	return s.conts, nil
}

// session reads one header. Returns SESSION_NOT_FOUND.
func (s *Server) session(ctx context.Context, id string) (store.Session, error) {
	hdr, err := s.store.GetSession(ctx, id)
	if err != nil {
		return store.Session{}, sessionError(id, err)
	}
	return hdr, nil
}

// sessionError maps store.ErrNotFound to SESSION_NOT_FOUND.
func sessionError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return &subagent.Error{Code: subagent.ESessionNotFound, Message: fmt.Sprintf("no session %q", id), Err: err}
	}
	return fmt.Errorf("read session %s: %w", id, err)
}

// page reads up to limit rows after the cursor after and returns the cursor
// of the next page ("" when there is none). A full page is followed by a
// one-row probe, so nextCursor never points at an empty page. An unknown
// cursor is INVALID_REQUEST.
func page[T any](ctx context.Context, limit int, list func(ctx context.Context, after string, n int) ([]T, error), after string, key func(T) string) ([]T, string, error) {
	rows, err := list(ctx, after, limit)
	if after != "" && errors.Is(err, store.ErrNotFound) {
		return nil, "", invalid(map[string]string{"after": "is not a known cursor"})
	}
	if err != nil || len(rows) < limit {
		return rows, "", err
	}
	last := key(rows[len(rows)-1])
	more, err := list(ctx, last, 1)
	if err != nil || len(more) == 0 {
		return rows, "", err
	}
	return rows, last, nil
}
