package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// createSession creates a root session with a fresh id.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	var req createSessionRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	opts := req.AgentOptions.seam()
	if opts == nil {
		opts = &subagent.AgentOptions{}
	}
	hdr := store.Session{
		ID:            uuid.NewString(),
		Cwd:           req.Cwd,
		Label:         req.Label,
		AgentProvider: opts.Provider,
		AgentModel:    opts.Model,
		MaxTokens:     opts.MaxTokens,
		Persona:       req.Persona,
		CreatedAt:     time.Now(),
	}
	if err := s.store.CreateSession(r.Context(), hdr); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	stored, err := s.session(r.Context(), hdr.ID)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sessions/"+hdr.ID)
	s.writeJSON(w, r, http.StatusCreated, sessionOut(stored, false))
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
	rows, next, err := page(r.Context(), limit, func(ctx context.Context, after string, n int) ([]store.Session, error) {
		f.AfterID, f.Limit = after, n
		return s.store.ListSessions(ctx, f)
	}, after, func(x store.Session) string { return x.ID })
	if err != nil {
		return fmt.Errorf("list sessions: %w", err)
	}
	out := sessionListJSON{Sessions: make([]sessionJSON, 0, len(rows)), NextCursor: next}
	for _, row := range rows {
		running, err := s.running(r.Context(), row.ID)
		if err != nil {
			return err
		}
		out.Sessions = append(out.Sessions, sessionOut(row, running))
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
	hdr, err := s.session(r.Context(), id)
	if err != nil {
		return err
	}
	running, err := s.running(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, sessionOut(hdr, running))
	return nil
}

// listSessionEvents answers one page of a session's log.
func (s *Server) listSessionEvents(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	after := p.int("after", -1, -1, 1<<62)
	limit := p.limit()
	if err := p.err(); err != nil {
		return err
	}
	evs, err := s.store.Events(r.Context(), id, after, limit)
	if err != nil {
		return sessionError(id, err)
	}
	out := sessionEventPageJSON{Events: make([]sessionEventJSON, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, sessionEventOut(e))
	}
	if len(evs) == limit {
		more, err := s.store.Events(r.Context(), id, evs[len(evs)-1].Seq, 1)
		if err != nil {
			return sessionError(id, err)
		}
		out.HasMore = len(more) > 0
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// listSessionChildren answers the direct subagent children of a session.
// Unlike the seam's listChildren (R129), an unknown session is
// SESSION_NOT_FOUND, as on every /v1/sessions/{id} route. Identity comes
// from the child headers; a child whose header records no mode is listed as
// a diagnostic entry.
func (s *Server) listSessionChildren(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	after := p.str("after", maxIDLength)
	limit := p.limit()
	if err := p.err(); err != nil {
		return err
	}
	if _, err := s.session(r.Context(), id); err != nil {
		return err
	}
	rows, next, err := page(r.Context(), limit, func(ctx context.Context, after string, n int) ([]store.Session, error) {
		return s.store.ListSessions(ctx, store.SessionFilter{ParentID: &id, AfterID: after, Limit: n})
	}, after, func(x store.Session) string { return x.ID })
	if err != nil {
		return fmt.Errorf("list children of %s: %w", id, err)
	}
	out := childListJSON{Entries: []childEntryJSON{}, NextCursor: next}
	for _, c := range rows {
		if c.Origin != "subagent" {
			continue
		}
		entry, err := s.childEntry(r.Context(), c)
		if err != nil {
			return err
		}
		out.Entries = append(out.Entries, entry)
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

func (s *Server) childEntry(ctx context.Context, c store.Session) (childEntryJSON, error) {
	if c.Mode == "" {
		return childEntryJSON{Kind: "diagnostic", ID: c.ID, Reason: "corrupt"}, nil
	}
	running, err := s.running(ctx, c.ID)
	if err != nil {
		return childEntryJSON{}, err
	}
	grand, err := s.store.ListSessions(ctx, store.SessionFilter{ParentID: &c.ID, Limit: 1})
	if err != nil {
		return childEntryJSON{}, fmt.Errorf("list children of %s: %w", c.ID, err)
	}
	hasChildren := len(grand) > 0
	return childEntryJSON{
		Kind: "child", ID: c.ID, Mode: c.Mode, Label: c.Label, Activity: activity(running),
		HasChildren: &hasChildren, Provider: c.Provider,
	}, nil
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

// running reports whether a run of child id is running.
func (s *Server) running(ctx context.Context, id string) (bool, error) {
	runs, err := s.store.ListRuns(ctx, store.RunFilter{ChildID: id, State: store.StateRunning, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("list running runs of %s: %w", id, err)
	}
	return len(runs) > 0, nil
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
