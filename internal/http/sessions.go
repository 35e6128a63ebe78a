package http

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// createSession creates a root session with a fresh id (see createRoot).
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	var req createSessionRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	stored, err := s.createRoot(r.Context(), uuid.NewString(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sessions/"+stored.ID)
	s.writeJSON(w, r, http.StatusCreated, sessionOut(stored, false))
	return nil
}

// createRoot creates root session id as req describes and returns its
// header as stored. A model route that is not configured is UNKNOWN_ROUTE
// (422) now rather than a failed turn later; a cwd outside the workspace
// roots is INVALID_REQUEST. An id that exists is store.ErrConflict.
func (s *Server) createRoot(ctx context.Context, id string, req createSessionRequest) (store.Session, error) {
	opts := req.AgentOptions.seam()
	if opts == nil {
		opts = &subagent.AgentOptions{}
	}
	if err := s.checkRoute(opts.Provider); err != nil {
		return store.Session{}, err
	}
	cwd, err := s.checkCwd(req.Cwd)
	if err != nil {
		return store.Session{}, err
	}
	hdr := store.Session{
		ID:            id,
		Cwd:           cwd,
		Label:         req.Label,
		AgentProvider: opts.Provider,
		AgentModel:    opts.Model,
		MaxTokens:     opts.MaxTokens,
		Persona:       req.Persona,
		CreatedAt:     time.Now(),
	}
	if err := s.store.CreateSession(ctx, hdr); err != nil {
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}
	return s.session(ctx, id)
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
	working, err := s.activity(r.Context(), rows)
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
	hdr, err := s.session(r.Context(), id)
	if err != nil {
		return err
	}
	running, err := s.running(r.Context(), hdr)
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
func (s *Server) listEntries(w http.ResponseWriter, r *http.Request, list func(c Continuations, ctx context.Context, id string) ([]subagent.ListEntry, error)) error {
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
		i := slices.IndexFunc(entries, func(e subagent.ListEntry) bool { return e.ID == after })
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

// continuations returns the continuation manager, or NOT_READY when the
// server runs without one.
func (s *Server) continuations() (Continuations, error) {
	if s.conts == nil {
		return nil, subagent.Errorf(codeNotReady, "this server runs no continuation manager")
	}
	return s.conts, nil
}

// checkRoute returns UNKNOWN_ROUTE when name is set and is not a
// configured model route; without Config.Routes nothing is checked.
func (s *Server) checkRoute(name string) error {
	if name == "" || s.modelRoutes == nil {
		return nil
	}
	_, _, err := s.modelRoutes.Resolve(name, "")
	if errors.Is(err, model.ErrUnknownRoute) {
		msg := fmt.Sprintf("unknown model route %q; configured: %s", name, strings.Join(s.modelRoutes.Names(), ", "))
		return &subagent.Error{Code: codeUnknownRoute, Message: msg, Fields: map[string]string{"agentOptions.provider": msg}, Err: err}
	}
	if err != nil {
		return fmt.Errorf("resolve model route %q: %w", name, err)
	}
	return nil
}

// checkCwd refuses a root session cwd outside the workspace roots
// (INVALID_REQUEST naming the field), so that no child, and no ACP agent,
// ever runs outside them, and returns the cwd to store: the path with its
// symlinks resolved, the one that was checked (a "root/link/.." whose link
// leads elsewhere resolves there, not to root). Containment is first
// checked on the cleaned path before the filesystem is looked at, and
// every refusal has the same words, so that the answer tells a client
// nothing about paths outside the roots.
func (s *Server) checkCwd(cwd string) (string, error) {
	if cwd == "" || len(s.workspaces) == 0 {
		return cwd, nil
	}
	clean := filepath.Clean(cwd)
	inside := slices.ContainsFunc(s.workspaces, func(root string) bool {
		rel, err := filepath.Rel(root, clean)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	})
	if inside {
		if real, err := config.ResolveWorkdir(cwd, s.workspaces); err == nil {
			return real, nil
		}
	}
	const msg = "must be an existing directory inside the workspace roots"
	return "", &subagent.Error{Code: subagent.EInvalidRequest, Message: "cwd " + msg, Fields: map[string]string{"cwd": msg}}
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

// activity reports, for a page of sessions, which are working, whichever
// replica drives them: a root session whose agent runs a turn (here, or
// on the replica holding its lease: store.Driving), or a running child
// (subagent.Running) — one store query each for the page's roots and
// children.
func (s *Server) activity(ctx context.Context, rows []store.Session) (map[string]bool, error) {
	working := map[string]bool{}
	var roots, children []string
	for _, row := range rows {
		switch {
		case row.ParentID != "":
			children = append(children, row.ID)
		case s.roots != nil:
			if _, running := s.roots.Live(ctx, row.ID); running {
				working[row.ID] = true
			} else {
				roots = append(roots, row.ID)
			}
		}
	}
	running, err := subagent.Running(ctx, s.store, children...)
	if err != nil {
		return nil, err
	}
	maps.Copy(working, running)
	if len(roots) > 0 {
		driven, err := s.store.Driving(ctx, roots, time.Now())
		if err != nil {
			return nil, fmt.Errorf("read the activity of %d root sessions: %w", len(roots), err)
		}
		maps.Copy(working, driven)
	}
	return working, nil
}

// running reports whether session hdr is working (see activity).
func (s *Server) running(ctx context.Context, hdr store.Session) (bool, error) {
	working, err := s.activity(ctx, []store.Session{hdr})
	return working[hdr.ID], err
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
