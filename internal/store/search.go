package store

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// SearchFilter selects sessions whose log mentions a text, for
// SearchSessions, oldest first as ListSessions.
type SearchFilter struct {
	// Query is matched, ignoring case, as a substring of one event's text
	// (SearchText). Empty matches nothing. Postgres folds the case of
	// letters beyond ASCII as its database locale does.
	Query string
	// ParentID, when non-nil, keeps only direct children of that session
	// ("" keeps only roots).
	ParentID *string
	// AfterID continues a search after the session with this id.
	AfterID string
	Limit   int
}

// SessionHit is a session whose log matched a search, with the first
// (lowest seq) event that matched.
type SessionHit struct {
	Session Session
	Event   Event
}

// SearchSkips is the event type search leaves out: streamed deltas repeat
// the assistant/message that follows them.
const SearchSkips = "assistant/chunk"

// SearchText is the text of an event that search reads: every string
// member named "text" at any depth (message and result content blocks),
// then the "arguments" of a tool call, one a line.
func SearchText(data json.RawMessage) string {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				c := x[k]
				if s, ok := c.(string); ok && k == "text" {
					b.WriteString(s)
					b.WriteByte('\n')
					continue
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
	if m, ok := v.(map[string]any); ok {
		if s, ok := m["arguments"].(string); ok {
			b.WriteString(s)
		}
	}
	return b.String()
}

// Matches reports whether text contains query, ignoring case.
func Matches(text, query string) bool {
	return query != "" && strings.Contains(strings.ToLower(text), strings.ToLower(query))
}

// Snippet returns up to about width runes of text around the first match
// of query (ignoring case), marked with "…" where cut, on one line.
func Snippet(text, query string, width int) string {
	text = strings.Join(strings.Fields(text), " ")
	lower := strings.ToLower(text)
	i := strings.Index(lower, strings.ToLower(query))
	if i < 0 || len(lower) != len(text) {
		// Lower-casing changed byte offsets: cut from the start.
		i = 0
	}
	start := max(0, i-width/3)
	for start > 0 && !utf8.RuneStart(text[start]) {
		start--
	}
	out := text[start:]
	if utf8.RuneCountInString(out) > width {
		out = string([]rune(out)[:width]) + "…"
	}
	if start > 0 {
		out = "…" + out
	}
	return out
}
