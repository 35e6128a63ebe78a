package pg

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/subagentd/subagentd/internal/store"
)

// searchText is the text of an event as migrations/000011_search.up.sql
// indexes it, written the same way so that queries use the index: the JSON
// array of the event's "text" strings, then its arguments.
const searchText = `(jsonb_path_query_array(e.data, 'strict $.**.text ? (@.type() == "string")')::text || ' ' || coalesce(e.data->>'arguments', ''))`

// SearchSessions finds matching events through session_events_text_idx,
// keeps the first of each session, and pages the sessions by (created_at,
// id). Returns store.ErrNotFound for an unknown AfterID.
func (s *Store) SearchSessions(ctx context.Context, f store.SearchFilter) (_ []store.SessionHit, err error) {
	defer wrap(&err, "search sessions")
	if f.Query == "" {
		return nil, nil
	}
	tenant := store.Tenant(ctx)
	q := query{args: []any{tenant, likePattern(f.Query)}}
	q.and("s.tenant = $1")
	if f.ParentID != nil {
		q.and("s.parent_id = ?", *f.ParentID)
	}
	if f.AfterID != "" {
		var created time.Time
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM sessions WHERE tenant = $1 AND id = $2`, tenant, f.AfterID).Scan(&created)
		if err != nil {
			return nil, fmt.Errorf("cursor %q: %w", f.AfterID, err)
		}
		q.and("(s.created_at, s.id) > (?, ?)", created, f.AfterID)
	}
	cols := "s." + strings.ReplaceAll(strings.Join(strings.Fields(sessionCols), " "), ", ", ", s.") + ", h.seq, h.type, h.time, h.data"
	from := `(SELECT DISTINCT ON (e.session_id) e.session_id, e.seq, e.type, e.time, e.data FROM session_events e
		WHERE e.tenant = $1 AND e.type <> 'assistant/chunk' AND ` + searchText + ` ILIKE $2
		ORDER BY e.session_id, e.seq) h JOIN sessions s ON s.id = h.session_id`
	rows, _ := s.pool.Query(ctx, q.sql(cols, from, "s.created_at, s.id", limit(f.Limit)), q.args...)
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.SessionHit, error) {
		var r sessionRow
		var e store.Event
		var data []byte
		err := row.Scan(&r.ID, &r.ParentID, &r.RootID, &r.Origin, &r.DelegationDepth, &r.SeedLength, &r.Cwd, &r.Label, &r.Provider, &r.Mode,
			&r.AgentProvider, &r.AgentModel, &r.MaxTokens, &r.Persona, &r.CreatedAt, &r.WakeParent, &r.Limits, &e.Seq, &e.Type, &e.Time, &data)
		e.Time, e.Data = e.Time.UTC(), data
		return store.SessionHit{Session: r.session(), Event: e}, err
	})
}

// likePattern is an ILIKE pattern for text containing query as searchText
// writes it: JSON-escaped (a quote in a message is \" there), with the
// pattern's own wildcards and escape character taken literally.
func likePattern(query string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(query) // a string always encodes
	quoted := strings.TrimSuffix(b.String(), "\n")
	inner := quoted[1 : len(quoted)-1]
	return "%" + strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(inner) + "%"
}
