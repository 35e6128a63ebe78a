package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/providers/turnlog"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// failingLog is a child log whose appends holding an event of type typ
// fail with err, writing nothing.
type failingLog struct {
	turnlog.Store
	typ string
	err error

	mu     sync.Mutex
	failed int
}

func (f *failingLog) AppendEvents(ctx context.Context, sessionID string, evs ...store.NewEvent) ([]store.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range evs {
		if e.Type == f.typ {
			f.failed++
			return nil, f.err
		}
	}
	return f.Store.AppendEvents(ctx, sessionID, evs...)
}

// heal makes every later append succeed.
func (f *failingLog) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.typ = ""
}

func (f *failingLog) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

var logFailures = []struct {
	name string
	typ  string
	err  error
}{
	{"chunk, store failing", sessionlog.EventAssistantChunk, errors.New("disk full")},
	{"chunk, lease lost", sessionlog.EventAssistantChunk, fmt.Errorf("memstore: append: %w", store.ErrFenced)},
	{"tool call", sessionlog.EventACPToolCall, errors.New("disk full")},
	{"the turn's message", sessionlog.EventAssistantMessage, errors.New("disk full")},
}

// A child log write that fails — the store's error or a fenced write —
// fails the turn: the run settles "error" and the log ends the turn as
// failed, never "completed" with events missing.
func TestRun_LogWriteFailureFailsTheTurn(t *testing.T) {
	t.Parallel()
	for _, tt := range logFailures {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, b := setup(t, "text")
			log := &failingLog{Store: b.store, typ: tt.typ, err: tt.err}
			p.store = log
			r := start(t, p, b)
			res := result(t, r)
			if res.StopReason != subagent.StopError || res.Diagnostic != turnlog.LogFailed || log.failures() == 0 {
				t.Fatalf("result %+v after %d failed writes, want error %q", res, log.failures(), turnlog.LogFailed)
			}
			assertTurnEnds(t, events(t, b.store, r.ChildID()), sessionlog.ReasonError)
		})
	}
}

// assertTurnEnds checks the reasons of the turn/ends in evs, in order,
// and that each failed one names the failed log write.
func assertTurnEnds(t *testing.T, evs []store.Event, want ...string) {
	t.Helper()
	var got []string
	for _, e := range evs {
		if e.Type != sessionlog.EventTurnEnd {
			continue
		}
		var d sessionlog.TurnEndData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Reason.Kind == sessionlog.ReasonError && d.Reason.Message != turnlog.LogFailed {
			t.Errorf("turn %d failed with %q, want %q", d.Turn, d.Reason.Message, turnlog.LogFailed)
		}
		got = append(got, d.Reason.Kind)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("turn ends %v, want %v", got, want)
	}
}

// The same for a continuable child's turn: its task ends "error", and the
// session goes on once the log can be written again.
func TestContinuable_LogWriteFailureFailsTheTurn(t *testing.T) {
	t.Parallel()
	for _, tt := range logFailures {
		if tt.typ == sessionlog.EventACPToolCall {
			continue // the remembering fake agent makes no tool calls
		}
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, b := continuable(t, "resume")
			log := &failingLog{Store: b.store, typ: tt.typ, err: tt.err}
			p.store = log
			w, _ := world(t, p, b)
			started := w.start(t, b, "flood3")
			if e := w.end(t, started.TaskID); e.StopReason != subagent.StopError || log.failures() == 0 {
				t.Fatalf("task ended %+v after %d failed writes, want error", e, log.failures())
			}
			log.heal()
			res := w.followup(t, started.ChildID, "beta")
			if e := w.end(t, res.TaskID); e.StopReason != subagent.StopCompleted || lastText(e) != "remembered: flood3" {
				t.Fatalf("followup after the failed turn ended %+v", e)
			}
			assertTurnEnds(t, allEvents(t, b.store, started.ChildID), sessionlog.ReasonError, sessionlog.ReasonCompleted)
		})
	}
}

// allEvents reads a session's whole log, a page at a time.
func allEvents(t *testing.T, st store.Store, sessionID string) []store.Event {
	t.Helper()
	var evs []store.Event
	for after := int64(-1); ; {
		page, err := st.Events(context.Background(), sessionID, after, 1000)
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		if len(page) == 0 {
			return evs
		}
		evs = append(evs, page...)
		after = page[len(page)-1].Seq
	}
}

// floodChunk is the fake agent's chunk of flood prompts (testdata/fakeagent).
var floodChunk = strings.Repeat("0123456789", 100)

// A one-shot run keeps at most turnlog.MaxOutput bytes of what the agent streams,
// however much that is; the log holds all of it.
func TestRun_OutputHeldIsBounded(t *testing.T) {
	t.Parallel()
	chunks := 3 * turnlog.MaxOutput / len(floodChunk) // three times the bound
	p, b := setup(t, "flood")
	r := start(t, p, b, model.TextBlock(fmt.Sprint(chunks)))
	res := result(t, r)
	text := model.Text(res.Output)
	want := strings.Repeat(floodChunk, turnlog.MaxOutput/len(floodChunk)+1)[:turnlog.MaxOutput] + turnlog.OutputCut
	if res.StopReason != subagent.StopCompleted || text != want {
		t.Fatalf("result %s with %d bytes of output, want completed with the first %d bytes and the cut note", res.StopReason, len(text), turnlog.MaxOutput)
	}
	if held := len(model.Text(r.(*run).Output())); held > turnlog.MaxOutput+len(turnlog.OutputCut) {
		t.Fatalf("the run holds %d bytes of output, more than %d and the cut note", held, turnlog.MaxOutput)
	}
	evs := allEvents(t, b.store, r.ChildID())
	if n := countType(evs, sessionlog.EventAssistantChunk); n != chunks {
		t.Fatalf("the log holds %d chunks, want all %d", n, chunks)
	}
	if got := sessionlog.OutcomeOf(evs).Output; model.Text(got) != want {
		t.Fatalf("the log's output has %d bytes, want the result's %d", len(model.Text(got)), len(want))
	}
}

// A continuable child's resident keeps neither the events its agent
// streams nor their text, turn after turn: only its user/messages and the
// bounded text of the running turn.
func TestContinuable_ResidentHoldsNoStreamedEvents(t *testing.T) {
	t.Parallel()
	p, b := continuable(t, "resume")
	const id = "child-1"
	sess := store.Session{ID: id, ParentID: parentID, Origin: "subagent", Cwd: b.root, Provider: p.Name(),
		Mode: subagent.ModeContinuable, CreatedAt: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ag, err := p.Materialize(ctx, subagent.MaterializeRequest{Session: sess,
		Create: func(ctx context.Context) error { return b.store.CreateSession(ctx, sess) }})
	if err != nil {
		t.Fatalf("Materialize: %v", err)
	}
	r := ag.(*liveChild)
	t.Cleanup(func() {
		if err := errors.Join(r.Close(context.Background()), p.Close()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	r.Track()
	turns, chunks := 3, 2*turnlog.MaxOutput/len(floodChunk)
	for i := range turns {
		msg := sessionlog.UserMessage{ID: fmt.Sprint("m", i), Role: "user", Content: textOutput(fmt.Sprint("flood", chunks)),
			Source: sessionlog.Source{Kind: "user"}}
		if _, err := r.FollowupMessage(ctx, msg); err != nil {
			t.Fatalf("FollowupMessage: %v", err)
		}
		select {
		case <-r.Idle():
		case <-ctx.Done():
			t.Fatalf("turn %d did not end: %v", i+1, ctx.Err())
		}
	}
	evs := allEvents(t, b.store, id)
	// Each turn streams its flood, then what the agent remembers.
	if n := countType(evs, sessionlog.EventAssistantChunk); n != turns*(chunks+1) {
		t.Fatalf("the log holds %d chunks, want %d", n, turns*(chunks+1))
	}
	if held := r.Events(); len(held) != turns || countType(held, sessionlog.EventUserMessage) != turns {
		t.Fatalf("the resident holds %d events, want only the %d user/messages", len(held), turns)
	}
	out := model.Text(r.Outcome().Output)
	if !strings.HasSuffix(out, turnlog.OutputCut) || len(out) != turnlog.MaxOutput+len(turnlog.OutputCut) {
		t.Fatalf("outcome output of %d bytes, want the last turn's %d and the cut note", len(out), turnlog.MaxOutput)
	}
	assertTurnEnds(t, evs, sessionlog.ReasonCompleted, sessionlog.ReasonCompleted, sessionlog.ReasonCompleted)
}
