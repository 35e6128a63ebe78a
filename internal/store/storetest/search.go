package storetest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/subagentd/subagentd/internal/store"
)

// hitKeys renders hits as "session:seq:type" for comparison.
func hitKeys(hits []store.SessionHit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = fmt.Sprintf("%s:%d:%s", h.Session.ID, h.Event.Seq, h.Event.Type)
	}
	return out
}

// textMsg is a user/message payload with one text block.
func textMsg(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"role": "user", "content": []map[string]string{{"type": "text", "text": text}}})
	return b
}

// seedSearch creates sessions whose logs say different things: a (a root)
// with a prompt and an answer, b (a child of a) with a tool call and its
// result, c (a root) with only streamed deltas, d (a root) with a literal
// percent sign and a quote.
func seedSearch(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()
	ok(t, s.CreateSession(ctx, store.Session{ID: "a", CreatedAt: sec(1)}))
	ok(t, s.CreateSession(ctx, store.Session{ID: "b", ParentID: "a", Origin: "subagent", CreatedAt: sec(2)}))
	ok(t, s.CreateSession(ctx, store.Session{ID: "c", CreatedAt: sec(3)}))
	ok(t, s.CreateSession(ctx, store.Session{ID: "d", CreatedAt: sec(4)}))
	must(s.AppendEvents(ctx, "a",
		store.NewEvent{Type: "turn/start", Time: sec(1), Data: json.RawMessage(`{"turn":1}`)},
		store.NewEvent{Type: "user/message", Time: sec(1), Data: textMsg("Summarise the Quick brown fox")},
		store.NewEvent{Type: "assistant/message", Time: sec(1), Data: json.RawMessage(`{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"text","text":"A lazy DOG, and a fox."}]}}`)},
	))(t)
	must(s.AppendEvents(ctx, "b",
		store.NewEvent{Type: "tool/call", Time: sec(2), Data: json.RawMessage(`{"callId":"c1","name":"read","arguments":"{\"path\":\"needle.go\"}"}`)},
		store.NewEvent{Type: "tool/result", Time: sec(2), Data: json.RawMessage(`{"callId":"c1","name":"read","content":[{"type":"text","text":"package needle // quick"}]}`)},
	))(t)
	must(s.AppendEvents(ctx, "c",
		store.NewEvent{Type: "assistant/chunk", Time: sec(3), Data: json.RawMessage(`{"turn":1,"step":1,"chunk":{"type":"text-delta","text":"only a streamed fox"}}`)},
	))(t)
	must(s.AppendEvents(ctx, "d",
		store.NewEvent{Type: "user/message", Time: sec(4), Data: textMsg(`Grow 1000 by 10% and say "done"`)},
		store.NewEvent{Type: "user/message", Time: sec(4), Data: textMsg(`it is 100%`)},
	))(t)
	// Another tenant's log mentions the fox too.
	ok(t, s.CreateSession(other(ctx), store.Session{ID: "x", CreatedAt: sec(1)}))
	must(s.AppendEvents(other(ctx), "x", store.NewEvent{Type: "user/message", Time: sec(1), Data: textMsg("a fox")}))(t)
}

var searchTests = []test{
	{"SearchSessions_FindsTextInMessagesToolCallsAndResults", func(t *testing.T, s store.Store) {
		seedSearch(t, s)
		ctx := t.Context()
		for _, tc := range []struct {
			query string
			want  []string
		}{
			// Case is ignored; the first matching event of each session.
			{"quick", []string{"a:1:user/message", "b:1:tool/result"}},
			{"DOG", []string{"a:2:assistant/message"}},
			// Tool call arguments are searched.
			{"needle.go", []string{"b:0:tool/call"}},
			// Streamed deltas are not, and another tenant's logs are invisible.
			{"fox", []string{"a:1:user/message"}},
			// Wildcards are literal; quotes match as written.
			{"100%", []string{"d:1:user/message"}},
			{"10%", []string{"d:0:user/message"}},
			{`say "done"`, []string{"d:0:user/message"}},
			{"_", nil},
			{"nowhere at all", nil},
			{"", nil},
		} {
			got := must(s.SearchSessions(ctx, store.SearchFilter{Query: tc.query}))(t)
			sameIDs(t, fmt.Sprintf("SearchSessions(%q)", tc.query), hitKeys(got), tc.want)
		}
		hits := must(s.SearchSessions(ctx, store.SearchFilter{Query: "needle"}))(t)
		if len(hits) != 1 || hits[0].Session.ParentID != "a" || !hits[0].Event.Time.Equal(sec(2)) ||
			!store.Matches(store.SearchText(hits[0].Event.Data), "needle") {
			t.Fatalf("hit for needle: %+v, want session b (child of a) with its tool call", hits)
		}
	}},
	{"SearchSessions_ParentFilterAndCursor", func(t *testing.T, s store.Store) {
		seedSearch(t, s)
		ctx := t.Context()
		sameIDs(t, "roots", hitKeys(must(s.SearchSessions(ctx, store.SearchFilter{Query: "quick", ParentID: new(string)}))(t)), []string{"a:1:user/message"})
		sameIDs(t, "children of a", hitKeys(must(s.SearchSessions(ctx, store.SearchFilter{Query: "quick", ParentID: ptr("a")}))(t)), []string{"b:1:tool/result"})
		var pages []string
		after := ""
		for {
			page := must(s.SearchSessions(ctx, store.SearchFilter{Query: "o", AfterID: after, Limit: 1}))(t)
			if len(page) == 0 {
				break
			}
			pages = append(pages, page[0].Session.ID)
			after = page[0].Session.ID
		}
		sameIDs(t, "pages of one", pages, []string{"a", "b", "d"})
		_, err := s.SearchSessions(ctx, store.SearchFilter{Query: "o", AfterID: "missing"})
		isErr(t, err, store.ErrNotFound, "SearchSessions after an unknown cursor")
	}},
}
