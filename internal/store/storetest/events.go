package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// newSession creates an empty session id in ctx's tenant.
func newSession(t *testing.T, s store.Store, id string) {
	t.Helper()
	ok(t, s.CreateSession(t.Context(), store.Session{ID: id, CreatedAt: t0}))
}

func ev(typ, data string) store.NewEvent {
	return store.NewEvent{Type: typ, Time: t0, Data: json.RawMessage(data)}
}

// numbered returns n events whose data records i.
func numbered(n int) []store.NewEvent {
	evs := make([]store.NewEvent, n)
	for i := range evs {
		evs[i] = ev("assistant/chunk", fmt.Sprintf(`{"i":%d}`, i))
	}
	return evs
}

// checkSeqs fails t unless evs carry seqs from, from+1, ….
func checkSeqs(t *testing.T, what string, evs []store.Event, from int64) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != from+int64(i) {
			t.Fatalf("%s: event %d has seq %d, want %d", what, i, e.Seq, from+int64(i))
		}
	}
}

var eventTests = []test{
	{"AppendEvents_BadInputIsInvalidAndAppendsNothing", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		must(s.AppendEvents(ctx, "s1", ev("turn/start", `{"turn":1}`)))(t)
		huge := `{"text":"` + strings.Repeat("x", store.MaxEventBytes) + `"}`
		for name, batch := range map[string][]store.NewEvent{
			"non-JSON data":  {ev("turn/end", `{"turn":1}`), ev("assistant/chunk", `{not json`)},
			"oversized data": {ev("assistant/chunk", huge)},
			"missing type":   {ev("", `{}`)},
			"overlong type":  {ev(strings.Repeat("t", store.MaxTypeLen+1), `{}`)},
			"non-UTF-8 type": {ev("bad\xff", `{}`)},
			"NUL in data":    {ev("user/message", `{"text":"a\u0000b"}`)},
			"lone surrogate": {ev("user/message", `{"text":"a\ud800b"}`)},
		} {
			_, err := s.AppendEvents(ctx, "s1", batch...)
			isErr(t, err, store.ErrInvalid, "AppendEvents("+name+")")
		}
		_, err := s.AppendEvents(ctx, "missing", ev("turn/start", `{"turn":1}`))
		isErr(t, err, store.ErrNotFound, "AppendEvents(unknown session)")
		if _, err := s.GetSession(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an append to an unknown session created it: %v", err)
		}
		got := must(s.Events(ctx, "s1", -1, 0))(t)
		if len(got) != 1 || got[0].Type != "turn/start" {
			t.Fatalf("log after refused appends = %v, want only the first event", got)
		}
	}},
	{"AppendEvents_Sec3_1_ContiguousZeroBasedSeqs", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		before := time.Now()
		first := must(s.AppendEvents(ctx, "s1",
			ev("turn/start", `{"turn":1}`),
			store.NewEvent{Type: "user/message", Data: json.RawMessage(`{"id":"m1","content":[{"type":"text","text":"hi"}]}`)},
			store.NewEvent{Type: "session/end-seed", Time: t0},
		))(t)
		second := must(s.AppendEvents(ctx, "s1", ev("step/start", `{"turn":1,"step":1}`), ev("step/end", `{"turn":1,"step":1}`)))(t)
		checkSeqs(t, "first append", first, 0)
		checkSeqs(t, "second append", second, 3)
		recent(t, "Time of an event appended with a zero Time", first[1].Time, before)

		want := []store.Event{
			{Seq: 0, Type: "turn/start", Time: t0, Data: json.RawMessage(`{"turn":1}`)},
			{Seq: 1, Type: "user/message", Time: first[1].Time, Data: json.RawMessage(`{"content":[{"text":"hi","type":"text"}],"id":"m1"}`)},
			{Seq: 2, Type: "session/end-seed", Time: t0, Data: json.RawMessage(`null`)}, // nil Data is JSON null
			{Seq: 3, Type: "step/start", Time: t0, Data: json.RawMessage(`{"step":1,"turn":1}`)},
			{Seq: 4, Type: "step/end", Time: t0, Data: json.RawMessage(`{"step":1,"turn":1}`)},
		}
		sameList(t, "AppendEvents results", append(first, second...), want, canonEvent)
		sameList(t, "Events(after -1)", must(s.Events(ctx, "s1", -1, 0))(t), want, canonEvent)
	}},
	{"Events_PagesAfterSeq", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		must(s.AppendEvents(ctx, "s1", numbered(150)...))(t)
		for _, tc := range []struct {
			after      int64
			limit      int
			from, want int64
		}{
			{-1, 0, 0, 100}, // default limit
			{-1, 5000, 0, 150},
			{-1, 2, 0, 2},
			{1, 2, 2, 2},
			{140, 0, 141, 9},
			{149, 0, 0, 0},
			{500, 10, 0, 0},
		} {
			got := must(s.Events(ctx, "s1", tc.after, tc.limit))(t)
			what := fmt.Sprintf("Events(after %d, limit %d)", tc.after, tc.limit)
			if int64(len(got)) != tc.want {
				t.Fatalf("%s returned %d events, want %d", what, len(got), tc.want)
			}
			checkSeqs(t, what, got, tc.from)
			for _, e := range got {
				same(t, what, e.Data, json.RawMessage(fmt.Sprintf(`{"i":%d}`, e.Seq)), canonJSON)
			}
		}
	}},
	{"EventsBefore_PagesBackFromSeq", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		newSession(t, s, "empty")
		must(s.AppendEvents(ctx, "s1", numbered(150)...))(t)
		for _, tc := range []struct {
			before     int64
			limit      int
			from, want int64
		}{
			{150, 0, 50, 100}, // default limit
			{1<<53 - 1, 10, 140, 10},
			{1<<53 - 1, 5000, 0, 150},
			{100, 30, 70, 30},
			{20, 30, 0, 20},
			{1, 5, 0, 1},
			{0, 5, 0, 0},
		} {
			got := must(s.EventsBefore(ctx, "s1", tc.before, tc.limit))(t)
			what := fmt.Sprintf("EventsBefore(before %d, limit %d)", tc.before, tc.limit)
			if int64(len(got)) != tc.want {
				t.Fatalf("%s returned %d events, want %d", what, len(got), tc.want)
			}
			checkSeqs(t, what, got, tc.from)
			for _, e := range got {
				same(t, what, e.Data, json.RawMessage(fmt.Sprintf(`{"i":%d}`, e.Seq)), canonJSON)
			}
		}
		// Paging back from the end meets every event once.
		var seen []store.Event
		for before := int64(1<<53 - 1); ; {
			page := must(s.EventsBefore(ctx, "s1", before, 40))(t)
			if len(page) == 0 {
				break
			}
			seen = append(page, seen...)
			before = page[0].Seq
		}
		checkSeqs(t, "paging back", seen, 0)
		if len(seen) != 150 {
			t.Fatalf("paging back read %d events, want 150", len(seen))
		}
		if got := must(s.EventsBefore(ctx, "empty", 10, 0))(t); len(got) != 0 {
			t.Fatalf("EventsBefore(empty log) = %v, want none", got)
		}
		_, err := s.EventsBefore(ctx, "nope", 10, 0)
		isErr(t, err, store.ErrNotFound, "EventsBefore(nope)")
	}},
	{"AppendEvents_EmptyBatchAppendsNothing", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		if got := must(s.AppendEvents(ctx, "s1"))(t); len(got) != 0 {
			t.Fatalf("AppendEvents() = %v, want none", got)
		}
		checkSeqs(t, "append after an empty batch", must(s.AppendEvents(ctx, "s1", numbered(1)...))(t), 0)
	}},
	{"AppendEvents_UnknownSessionIsNotFound", func(t *testing.T, s store.Store) {
		_, err := s.AppendEvents(t.Context(), "nope", numbered(1)...)
		isErr(t, err, store.ErrNotFound, "AppendEvents(nope)")
		_, err = s.AppendEvents(t.Context(), "nope")
		isErr(t, err, store.ErrNotFound, "AppendEvents(nope, no events)")
	}},
	{"Events_UnknownSessionIsNotFound", func(t *testing.T, s store.Store) {
		_, err := s.Events(t.Context(), "nope", -1, 0)
		isErr(t, err, store.ErrNotFound, "Events(nope)")
	}},
	{"AppendEvents_InvalidJSONAppendsNothing", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		must(s.AppendEvents(ctx, "s1", numbered(2)...))(t)
		_, err := s.AppendEvents(ctx, "s1", ev("a", `{}`), ev("b", `{"unterminated":`), ev("c", `{}`))
		isInvalid(t, err, "AppendEvents(invalid JSON)")
		if got := must(s.Events(ctx, "s1", -1, 0))(t); len(got) != 2 {
			t.Fatalf("a failed batch left %d events, want the 2 before it", len(got))
		}
		checkSeqs(t, "append after a failed batch", must(s.AppendEvents(ctx, "s1", numbered(2)...))(t), 2)
	}},
	{"AppendEvents_ConcurrentAppendsStayContiguous", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		const writers, appends = 8, 10
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for range writers {
			wg.Go(func() {
				for range appends {
					got, err := s.AppendEvents(ctx, "s1", numbered(3)...)
					if err != nil {
						errs <- err
						return
					}
					if got[1].Seq != got[0].Seq+1 || got[2].Seq != got[0].Seq+2 {
						errs <- fmt.Errorf("one batch got seqs %d, %d, %d", got[0].Seq, got[1].Seq, got[2].Seq)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		all := must(s.Events(ctx, "s1", -1, 1000))(t)
		if len(all) != writers*appends*3 {
			t.Fatalf("log holds %d events, want %d", len(all), writers*appends*3)
		}
		checkSeqs(t, "log after concurrent appends", all, 0)
	}},
	{"Events_CopyOnReturn", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		in := json.RawMessage(`{"k":"v"}`)
		out := must(s.AppendEvents(ctx, "s1", store.NewEvent{Type: "x", Data: in}))(t)
		in[2], out[0].Data[2] = 'X', 'X'
		got := must(s.Events(ctx, "s1", -1, 0))(t)
		got[0].Data[2] = 'X'
		same(t, "stored data", must(s.Events(ctx, "s1", -1, 0))(t)[0].Data, json.RawMessage(`{"k":"v"}`), canonJSON)

		// Several events of one call: growing one returned (or read) data
		// must change neither its neighbour nor the log.
		two := must(s.AppendEvents(ctx, "s1", store.NewEvent{Type: "a", Data: json.RawMessage(`[1]`)},
			store.NewEvent{Type: "b", Data: json.RawMessage(`[2]`)}))(t)
		grownOut := append(two[0].Data, " garbage"...)
		same(t, "second returned data", two[1].Data, json.RawMessage(`[2]`), canonJSON)
		read := must(s.Events(ctx, "s1", 0, 0))(t)
		grownRead := append(read[0].Data, " garbage"...)
		same(t, "second read data", read[1].Data, json.RawMessage(`[2]`), canonJSON)
		log := must(s.Events(ctx, "s1", 0, 0))(t)
		sameList(t, "stored data of the call", []json.RawMessage{log[0].Data, log[1].Data},
			[]json.RawMessage{json.RawMessage(`[1]`), json.RawMessage(`[2]`)}, canonJSON)
		if string(grownOut) != "[1] garbage" || string(grownRead) != "[1] garbage" {
			t.Fatalf("grown data %q, %q", grownOut, grownRead)
		}
	}},
	{"LogTail_StartsAtTheNewestSnapshot", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		newSession(t, s, "s1")
		if got := must(s.LogTail(ctx, "s1", 0))(t); len(got) != 0 {
			t.Fatalf("LogTail of an empty log = %v, want none", got)
		}
		must(s.AppendEvents(ctx, "s1", numbered(5)...))(t)
		tail := must(s.LogTail(ctx, "s1", 0))(t)
		checkSeqs(t, "LogTail without a snapshot", tail, 0)
		if len(tail) != 5 {
			t.Fatalf("LogTail without a snapshot returned %d events, want the whole log of 5", len(tail))
		}
		// Snapshots at seqs 5 and 9, in batches with other events.
		must(s.AppendEvents(ctx, "s1", ev(store.SnapshotEvent, `{"n":1}`), ev("turn/end", `{"turn":1}`)))(t)
		must(s.AppendEvents(ctx, "s1", numbered(1)[0], ev("turn/end", `{"turn":2}`), ev(store.SnapshotEvent, `{"n":2}`)))(t)
		must(s.AppendEvents(ctx, "s1", numbered(3)...))(t)
		tail = must(s.LogTail(ctx, "s1", 0))(t)
		checkSeqs(t, "LogTail", tail, 9)
		if len(tail) != 4 || tail[0].Type != store.SnapshotEvent {
			t.Fatalf("LogTail = %v, want the snapshot at seq 9 and the 3 events after it", tail)
		}
		same(t, "LogTail snapshot data", tail[0].Data, json.RawMessage(`{"n":2}`), canonJSON)
		sameList(t, "LogTail events after the snapshot", tail[1:], must(s.Events(ctx, "s1", 9, 0))(t), canonEvent)
		page := must(s.LogTail(ctx, "s1", 2))(t)
		checkSeqs(t, "LogTail(limit 2)", page, 9)
		if len(page) != 2 {
			t.Fatalf("LogTail(limit 2) returned %d events", len(page))
		}
		// A snapshot that ends the log is the whole tail.
		must(s.AppendEvents(ctx, "s1", ev(store.SnapshotEvent, `{"n":3}`)))(t)
		tail = must(s.LogTail(ctx, "s1", 0))(t)
		checkSeqs(t, "LogTail ending in a snapshot", tail, 13)
		if len(tail) != 1 {
			t.Fatalf("LogTail ending in a snapshot = %v, want only it", tail)
		}
	}},
	{"LogTail_FromCreationEvents", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		must(s.CreateSessionWithEvents(ctx, store.Session{ID: "s1", CreatedAt: t0},
			ev("subagent/descriptor", `{}`), ev(store.SnapshotEvent, `{}`), ev("user/message", `{}`)))(t)
		tail := must(s.LogTail(ctx, "s1", 0))(t)
		checkSeqs(t, "LogTail of a created log", tail, 1)
		if len(tail) != 2 {
			t.Fatalf("LogTail of a created log = %v, want its snapshot and the event after it", tail)
		}
	}},
	{"LogTail_UnknownSessionIsNotFound", func(t *testing.T, s store.Store) {
		ctx := t.Context()
		_, err := s.LogTail(ctx, "missing", 0)
		isErr(t, err, store.ErrNotFound, "LogTail(unknown session)")
		newSession(t, s, "s1")
		must(s.AppendEvents(ctx, "s1", ev(store.SnapshotEvent, `{}`)))(t)
		_, err = s.LogTail(other(ctx), "s1", 0)
		isErr(t, err, store.ErrNotFound, "LogTail(session of another tenant)")
	}},
}
