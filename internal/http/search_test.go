package http

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// TestSessions_SearchInsideConversations: ?q= lists the sessions whose log
// says the text, each with the event that does and the words around it;
// the parent filter and paging apply; a short or bad query is 400.
func TestSessions_SearchInsideConversations(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	msg := func(text string) store.NewEvent {
		data, _ := json.Marshal(map[string]any{"role": "user", "content": []map[string]string{{"type": "text", "text": text}}})
		return store.NewEvent{Type: "user/message", Data: data}
	}
	var ids []string
	for _, label := range []string{"one", "two", "three"} {
		var s sessionJSON
		b.want(t, http.StatusCreated, call{method: http.MethodPost, path: "/v1/sessions", body: map[string]any{"label": label}}).decode(t, &s)
		ids = append(ids, s.ID)
	}
	long := strings.Repeat("filler words ", 30) + "the Kestrel migration plan " + strings.Repeat("more words ", 30)
	if _, err := b.st.AppendEvents(ctx, ids[0], msg("hello"), msg(long)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.AppendEvents(ctx, ids[2], msg("KESTREL?")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.AppendEvents(ctx, ids[1], msg("nothing here")); err != nil {
		t.Fatal(err)
	}

	var list sessionListJSON
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions?q=kestrel"}).decode(t, &list)
	if len(list.Sessions) != 2 || list.Sessions[0].ID != ids[0] || list.Sessions[1].ID != ids[2] {
		t.Fatalf("search for kestrel: %+v", list.Sessions)
	}
	m := list.Sessions[0].Match
	if m == nil || m.Seq != 1 || m.Type != "user/message" || !strings.Contains(m.Snippet, "the Kestrel migration plan") ||
		!strings.HasPrefix(m.Snippet, "…") || !strings.HasSuffix(m.Snippet, "…") || len([]rune(m.Snippet)) > snippetLength+2 {
		t.Fatalf("match %+v", m)
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions?q=kestrel&limit=1"}).decode(t, &list)
	if len(list.Sessions) != 1 || list.NextCursor != ids[0] {
		t.Fatalf("first page: %+v next %q", list.Sessions, list.NextCursor)
	}
	list = sessionListJSON{}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions?q=kestrel&limit=1&after=" + url.QueryEscape(ids[0])}).decode(t, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].ID != ids[2] || list.NextCursor != "" {
		t.Fatalf("second page: %+v next %q", list.Sessions, list.NextCursor)
	}
	b.want(t, http.StatusOK, call{method: http.MethodGet, path: "/v1/sessions?q=kestrel&parentSessionId=" + url.QueryEscape(ids[0])}).decode(t, &list)
	if len(list.Sessions) != 0 {
		t.Fatalf("children of one: %+v", list.Sessions)
	}
	for _, q := range []string{"ke", strings.Repeat("x", maxQueryLength+1)} {
		b.wantProblem(t, http.StatusBadRequest, subagent.EInvalidRequest, call{method: http.MethodGet, path: "/v1/sessions?q=" + q, invalid: true})
	}
	// Not UTF-8: the spec's validator reads strings as text, so only the
	// answer is checked.
	res, err := http.Get(b.ts.URL + "/v1/sessions?q=%ff%fe%fd")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("a query that is not UTF-8: %s %s", res.Status, res.Header.Get("Content-Type"))
	}
}
