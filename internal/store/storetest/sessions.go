package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

func ptr[T any](v T) *T { return &v }

// child returns a child session header of parent.
func child(id, parent string, created time.Time) store.Session {
	return store.Session{
		ID: id, ParentID: parent, Origin: "subagent", DelegationDepth: 1, Cwd: "/w",
		Provider: "spawn", Mode: "continuable", CreatedAt: created,
	}
}

func listIDs(ss []store.Session) []string {
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.ID
	}
	return ids
}

func sameIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

var sessionTests = []test{
	{"CreateGet_RoundTripsEveryField", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		want := store.Session{
			ID: "s1", ParentID: "p1", Origin: "subagent", DelegationDepth: 2, SeedLength: 7,
			Cwd: "/srv/work", Label: "review", Provider: "fork", Mode: "one-shot",
			AgentProvider: "openai", AgentModel: "gpt-x", MaxTokens: 4096,
			Persona: ptr("terse reviewer"), CreatedAt: t0, WakeParent: true,
		}
		ok(t, s.CreateSession(ctx, want))
		same(t, "GetSession", must(s.GetSession(ctx, "s1"))(t), want, canonSession)
		sameList(t, "ListSessions", must(s.ListSessions(ctx, store.SessionFilter{}))(t), []store.Session{want}, canonSession)

		root := store.Session{ID: "root", Cwd: "/w", CreatedAt: t0}
		ok(t, s.CreateSession(ctx, root))
		same(t, "GetSession(root)", must(s.GetSession(ctx, "root"))(t), root, canonSession)
	}},
	{"CreateSession_ExistingIDConflicts", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "s1", Label: "first", CreatedAt: t0}))
		isErr(t, s.CreateSession(ctx, store.Session{ID: "s1", Label: "second", CreatedAt: t0}), store.ErrConflict, "CreateSession(s1 again)")
		if got := must(s.GetSession(ctx, "s1"))(t); got.Label != "first" {
			t.Fatalf("conflicting create changed the header: label %q", got.Label)
		}
	}},
	{"CreateSessionWithEvents_StoresHeaderAndLogAtOnce", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		hdr := child("c1", "", t0)
		hdr.WakeParent = true
		stored := must(s.CreateSessionWithEvents(ctx, hdr, numbered(3)...))(t)
		var want []store.Event
		for i, e := range numbered(3) {
			want = append(want, store.Event{Seq: int64(i), Type: e.Type, Time: e.Time, Data: e.Data})
		}
		sameList(t, "CreateSessionWithEvents", stored, want, canonEvent)
		same(t, "GetSession", must(s.GetSession(ctx, "c1"))(t), hdr, canonSession)
		// A listing reads the rows themselves, not a header cache.
		sameList(t, "ListSessions", must(s.ListSessions(ctx, store.SessionFilter{}))(t), []store.Session{hdr}, canonSession)
		sameList(t, "Events", must(s.Events(ctx, "c1", -1, 0))(t), want, canonEvent)
		next := must(s.AppendEvents(ctx, "c1", numbered(1)...))(t)
		checkSeqs(t, "AppendEvents after", next, 3)

		empty := must(s.CreateSessionWithEvents(ctx, child("c2", "", t0)))(t)
		if len(empty) != 0 || len(must(s.Events(ctx, "c2", -1, 0))(t)) != 0 {
			t.Fatalf("no events: stored %+v", empty)
		}
	}},
	{"CreateSessionWithEvents_ConflictOrBadEventStoresNothing", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		_, err := s.CreateSessionWithEvents(ctx, store.Session{ID: "s1", Label: "again"}, numbered(2)...)
		isErr(t, err, store.ErrConflict, "CreateSessionWithEvents(s1 again)")
		if n := len(must(s.Events(ctx, "s1", -1, 0))(t)); n != 0 {
			t.Fatalf("a conflicting create appended %d events to the existing session", n)
		}
		_, err = s.CreateSessionWithEvents(ctx, store.Session{ID: "s2"}, ev("turn/start", `{}`), ev("x", `{bad`))
		isErr(t, err, store.ErrInvalid, "CreateSessionWithEvents(bad event)")
		_, err = s.GetSession(ctx, "s2")
		isErr(t, err, store.ErrNotFound, "GetSession after a refused create")
	}},
	{"GetSession_UnknownIsNotFound", func(t *testing.T, s store.Store) {
		_, err := s.GetSession(t.Context(), "nope")
		isErr(t, err, store.ErrNotFound, "GetSession(nope)")
	}},
	{"CreateSession_ZeroCreatedAtIsNow", func(t *testing.T, s store.Store) {
		before := time.Now()
		ok(t, s.CreateSession(t.Context(), store.Session{ID: "s1"}))
		recent(t, "CreatedAt", must(s.GetSession(t.Context(), "s1"))(t).CreatedAt, before)
	}},
	{"GetSession_CopyOnReturn", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "s1", Persona: ptr("a"), CreatedAt: t0}))
		got := must(s.GetSession(ctx, "s1"))(t)
		*got.Persona = "mutated"
		if p := must(s.GetSession(ctx, "s1"))(t).Persona; *p != "a" {
			t.Fatalf("caller mutated the stored persona: %q", *p)
		}
	}},
	{"ListSessions_OrderedByCreatedAtThenIDWithCursor", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		// Inserted out of order; b and a tie on CreatedAt and sort by ID.
		for _, h := range []store.Session{
			{ID: "e", CreatedAt: sec(4)},
			{ID: "b", CreatedAt: sec(2)},
			{ID: "c", CreatedAt: sec(1)},
			{ID: "a", CreatedAt: sec(2)},
			{ID: "d", CreatedAt: sec(3)},
		} {
			ok(t, s.CreateSession(ctx, h))
		}
		sameIDs(t, "ListSessions", listIDs(must(s.ListSessions(ctx, store.SessionFilter{}))(t)), []string{"c", "a", "b", "d", "e"})
		var pages [][]string
		after := ""
		for {
			page := must(s.ListSessions(ctx, store.SessionFilter{AfterID: after, Limit: 2}))(t)
			if len(page) == 0 {
				break
			}
			pages = append(pages, listIDs(page))
			after = page[len(page)-1].ID
		}
		sameIDs(t, "pages", []string{fmt.Sprint(pages)}, []string{"[[c a] [b d] [e]]"})
	}},
	{"ListSessions_ParentFilter", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		for _, h := range []store.Session{
			{ID: "r1", CreatedAt: sec(0)},
			child("c1", "r1", sec(1)),
			{ID: "r2", CreatedAt: sec(2)},
			child("c2", "r1", sec(3)),
			child("c3", "r2", sec(4)),
			child("g1", "c1", sec(5)),
		} {
			ok(t, s.CreateSession(ctx, h))
		}
		for _, tc := range []struct {
			parent *string
			want   []string
		}{
			{nil, []string{"r1", "c1", "r2", "c2", "c3", "g1"}},
			{ptr(""), []string{"r1", "r2"}},
			{ptr("r1"), []string{"c1", "c2"}},
			{ptr("c1"), []string{"g1"}},
		} {
			got := must(s.ListSessions(ctx, store.SessionFilter{ParentID: tc.parent}))(t)
			sameIDs(t, fmt.Sprintf("ListSessions(parent %v)", show(tc.parent)), listIDs(got), tc.want)
		}
		got := must(s.ListSessions(ctx, store.SessionFilter{ParentID: ptr("r1"), AfterID: "c1"}))(t)
		sameIDs(t, "ListSessions(parent r1 after c1)", listIDs(got), []string{"c2"})
	}},
	{"ListSessions_R129_UnknownParentIsEmpty", func(t *testing.T, s store.Store) {
		ok(t, s.CreateSession(t.Context(), store.Session{ID: "r1", CreatedAt: t0}))
		got := must(s.ListSessions(t.Context(), store.SessionFilter{ParentID: ptr("nope")}))(t)
		if len(got) != 0 {
			t.Fatalf("ListSessions(unknown parent) = %v, want empty", listIDs(got))
		}
	}},
	{"ListSessions_UnknownCursorIsNotFound", func(t *testing.T, s store.Store) {
		_, err := s.ListSessions(t.Context(), store.SessionFilter{AfterID: "nope"})
		isErr(t, err, store.ErrNotFound, "ListSessions(after nope)")
	}},
	{"ListSessions_DefaultLimit100", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		for i := range 101 {
			ok(t, s.CreateSession(ctx, store.Session{ID: fmt.Sprintf("s%03d", i), CreatedAt: t0}))
		}
		if got := must(s.ListSessions(ctx, store.SessionFilter{}))(t); len(got) != 100 || got[99].ID != "s099" {
			t.Fatalf("ListSessions(Limit 0) returned %d sessions, want the first 100", len(got))
		}
		if got := must(s.ListSessions(ctx, store.SessionFilter{Limit: 5000}))(t); len(got) != 101 {
			t.Fatalf("ListSessions(Limit 5000) returned %d sessions, want all 101", len(got))
		}
	}},
	{"Lookups_NotUTF8_NotFoundOrInvalid", func(t *testing.T, s store.Store) {
		// Text that is no UTF-8 finds nothing; a store may instead refuse
		// it as ErrInvalid (Postgres does), never with another error.
		ctx := t.Context()
		ok(t, s.CreateSession(ctx, store.Session{ID: "s1", CreatedAt: t0}))
		bad := "s\xff\xfe"
		check := func(call string, err error, found bool) {
			t.Helper()
			if found || (err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrInvalid)) {
				t.Fatalf("%s: found %v, error %v; want nothing found, ErrNotFound or ErrInvalid", call, found, err)
			}
		}
		_, err := s.GetSession(ctx, bad)
		check("GetSession", err, false)
		list, err := s.ListSessions(ctx, store.SessionFilter{ParentID: &bad})
		check("ListSessions(ParentID)", err, len(list) > 0)
		list, err = s.ListSessions(ctx, store.SessionFilter{AfterID: bad})
		check("ListSessions(AfterID)", err, len(list) > 0)
		runs, err := s.ListRuns(ctx, store.RunFilter{ChildID: bad})
		check("ListRuns(ChildID)", err, len(runs) > 0)
		runs, err = s.ListRuns(ctx, store.RunFilter{ParentID: bad, TaskID: bad})
		check("ListRuns(ParentID, TaskID)", err, len(runs) > 0)
		_, err = s.GetRun(ctx, bad)
		check("GetRun", err, false)
		evs, err := s.Events(ctx, bad, -1, 0)
		check("Events", err, len(evs) > 0)
	}},
}
