package http

import (
	"context"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/store"
)

const (
	// minQueryLength is the shortest search: shorter text cannot use
	// Postgres' trigram index and would read every log.
	minQueryLength = 3
	maxQueryLength = 200
	// snippetLength bounds, in runes, the text shown around a match.
	snippetLength = 160
)

// searchQuery reads the q parameter of GET /v1/sessions: "" when absent.
func searchQuery(p *params) string {
	q := p.str("q", maxQueryLength)
	if q != "" && utf8.RuneCountInString(q) < minQueryLength {
		p.fail("q", fmt.Sprintf("must have %d to %d characters", minQueryLength, maxQueryLength))
	}
	return q
}

// searchSessions answers GET /v1/sessions?q=: the sessions f selects whose
// logs mention q, each with the first event that does and the text around
// the match.
func (s *Server) searchSessions(w http.ResponseWriter, r *http.Request, q string, f store.SessionFilter) error {
	hits, next, err := page(r.Context(), f.Limit, func(ctx context.Context, after string, n int) ([]store.SessionHit, error) {
		return s.store.SearchSessions(ctx, store.SearchFilter{Query: q, ParentID: f.ParentID, AfterID: after, Limit: n})
	}, f.AfterID, func(h store.SessionHit) string { return h.Session.ID })
	if err != nil {
		return fmt.Errorf("search sessions: %w", err)
	}
	rows := make([]store.Session, len(hits))
	for i, h := range hits {
		rows[i] = h.Session
	}
	working, err := s.sessions.Activity(r.Context(), rows)
	if err != nil {
		return err
	}
	out := sessionListJSON{Sessions: make([]sessionJSON, 0, len(hits)), NextCursor: next}
	for _, h := range hits {
		js := sessionOut(h.Session, working[h.Session.ID])
		js.Match = &matchJSON{Seq: h.Event.Seq, Type: h.Event.Type, Snippet: store.Snippet(store.SearchText(h.Event.Data), q, snippetLength)}
		out.Sessions = append(out.Sessions, js)
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}
