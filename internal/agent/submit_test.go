package agent

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestSubmitSteer_R96_CallerIDsAdmittedInSubmissionOrder(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	gate, reached := make(chan struct{}), make(chan struct{})
	m := scripted.New(scripted.Step{Text: "first", Gate: gate, Reached: reached}, scripted.Step{Text: "second"})
	a := newAgent(t, st, Config{Model: m})
	followup(t, a, "go")
	<-reached
	var settled []<-chan error
	for _, id := range []string{"m1", "m2", "m3"} {
		ch, err := a.SubmitSteer(testCtx(t), sessionlog.UserMessage{ID: id, Content: text(id), Source: userSrc})
		if err != nil {
			t.Fatalf("SubmitSteer(%s): %v", id, err)
		}
		settled = append(settled, ch)
	}
	close(gate)
	for i, ch := range settled {
		if err := <-ch; err != nil {
			t.Errorf("steer %d: %v", i, err)
		}
	}
	waitIdle(t, a)
	var ids []string
	for _, um := range ofType[sessionlog.UserMessage](t, a.Events(), sessionlog.EventUserMessage) {
		ids = append(ids, um.ID)
	}
	if !slices.Equal(ids[1:], []string{"m1", "m2", "m3"}) {
		t.Errorf("user message ids %v", ids)
	}
	req := m.Requests()[1]
	var texts []string
	for _, msg := range req.Messages[len(req.Messages)-3:] {
		texts = append(texts, model.Text(msg.Content))
	}
	if !slices.Equal(texts, []string{"m1", "m2", "m3"}) {
		t.Errorf("second request ends with %v", texts)
	}
}

func TestSubmitSteer_R96_RejectedOnIdleAndOnCancel(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{})
	a := newAgent(t, nil, Config{Model: firstBlocks(reached)})
	if _, err := a.SubmitSteer(context.Background(), sessionlog.UserMessage{ID: "early", Content: text("x")}); !errors.Is(err, subagent.ErrSteerRejected) {
		t.Errorf("idle: %v", err)
	}
	followup(t, a, "go")
	<-reached
	ch, err := a.SubmitSteer(context.Background(), sessionlog.UserMessage{ID: "late", Content: text("y")})
	if err != nil {
		t.Fatal(err)
	}
	a.Cancel(sessionlog.CauseUser, true)
	if err := <-ch; !errors.Is(err, subagent.ErrSteerRejected) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestFollowupMessage_R103_DiscardedMessageIsRedelivered(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	reached := make(chan struct{})
	first := newAgent(t, st, Config{Model: firstBlocks(reached)})
	followup(t, first, "a")
	<-reached
	if _, err := first.FollowupMessage(testCtx(t), sessionlog.UserMessage{ID: "parked", Content: text("b")}); err != nil {
		t.Fatal(err)
	}
	// Close discards the queued message unrun; its owner still holds it.
	if err := first.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	second := newAgent(t, st, Config{Model: scripted.New(scripted.Step{Text: "done"})})
	if _, err := second.FollowupMessage(testCtx(t), sessionlog.UserMessage{ID: "parked", Content: text("b")}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, second)
	if got := userTexts(t, second.Events()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("user messages %v", got)
	}
	// Once claimed, it is not delivered again.
	third := newAgent(t, st, Config{Model: scripted.New(scripted.Step{Text: "again"})})
	if _, err := third.FollowupMessage(testCtx(t), sessionlog.UserMessage{ID: "parked", Content: text("b")}); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, third)
	if got := userTexts(t, third.Events()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("user messages after redelivering a claimed message: %v", got)
	}
}

func TestFollowupMessage_CancelWithoutKeepInboxAllowsRedelivery(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{})
	a := newAgent(t, nil, Config{Model: firstBlocks(reached)})
	followup(t, a, "a")
	<-reached
	msg := sessionlog.UserMessage{ID: "m", Content: text("b")}
	if _, err := a.FollowupMessage(testCtx(t), msg); err != nil {
		t.Fatal(err)
	}
	a.Cancel(sessionlog.CauseUser, false)
	waitIdle(t, a)
	if _, err := a.FollowupMessage(testCtx(t), msg); err != nil {
		t.Fatal(err)
	}
	if !a.Running() {
		t.Fatal("redelivered message did not open a turn")
	}
	a.Cancel(sessionlog.CauseUser, false)
	waitIdle(t, a)
	if got := userTexts(t, a.Events()); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("user messages %v", got)
	}
}
