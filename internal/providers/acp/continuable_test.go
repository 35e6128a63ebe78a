package acp

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/children"
	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// contWorld is one subagentd process for continuable ACP children: a
// Service and a Manager over the provider, sharing the bundle's store.
type contWorld struct {
	p     *Provider
	svc   *subagent.Service
	m     *children.Manager
	mu    sync.Mutex
	ends  map[string]subagent.Event // by task id
	ended chan struct{}             // closed and replaced on every end
}

// continuable returns a provider of the fake agent in mode remember with
// caps, persisting its sessions in a directory of the bundle.
func continuable(t *testing.T, caps string, edit ...func(*config.ProviderConfig)) (*Provider, *bundle) {
	t.Helper()
	state := t.TempDir()
	return setup(t, "remember", append([]func(*config.ProviderConfig){func(c *config.ProviderConfig) {
		c.Env["FAKE_CAPS"] = caps
		c.Env["FAKE_STATE"] = state
		c.IdleTimeout = wait
	}}, edit...)...)
}

// world starts a process over p; stop ends it (the test's cleanup does
// when the test did not).
func world(t *testing.T, p *Provider, b *bundle) (w *contWorld, stop func()) {
	t.Helper()
	w = &contWorld{p: p, ends: map[string]subagent.Event{}, ended: make(chan struct{})}
	log := p.log
	w.svc = subagent.NewService(subagent.Config{Store: b.store, Logger: log, Owner: "test"})
	if err := w.svc.Register(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	w.svc.Subscribe("", func(_ context.Context, e subagent.Event) error {
		if e.Type == subagent.EventEnd {
			w.mu.Lock()
			w.ends[e.TaskID] = e
			close(w.ended)
			w.ended = make(chan struct{})
			w.mu.Unlock()
		}
		return nil
	})
	w.m = children.NewManager(w.svc, children.ManagerConfig{Logger: log})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
			defer cancel()
			if err := w.m.Shutdown(ctx); err != nil {
				t.Errorf("manager shutdown: %v", err)
			}
			if err := w.svc.Shutdown(ctx); err != nil {
				t.Errorf("service shutdown: %v", err)
			}
			if err := p.Close(); err != nil {
				t.Errorf("provider close: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

func (w *contWorld) start(t *testing.T, b *bundle, prompt string) children.ContinuableStarted {
	t.Helper()
	res, err := w.m.StartContinuable(context.Background(), children.ContinuableRequest{
		Provider: w.p.Name(), Label: "background", Prompt: textOutput(prompt),
		Parent: subagent.Parent{Session: store.Session{ID: parentID, Cwd: b.root}},
	})
	if err != nil {
		t.Fatalf("StartContinuable: %v", err)
	}
	return res
}

func (w *contWorld) followup(t *testing.T, childID, content string) children.FollowupResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res, err := w.m.Followup(ctx, parentID, childID, textOutput(content), sessionlog.Source{})
	if err != nil {
		t.Fatalf("Followup: %v", err)
	}
	return res
}

// end waits for the subagent/end of taskID.
func (w *contWorld) end(t *testing.T, taskID string) subagent.Event {
	t.Helper()
	timeout := time.After(wait)
	for {
		w.mu.Lock()
		e, ok := w.ends[taskID]
		ended := w.ended
		w.mu.Unlock()
		if ok {
			return e
		}
		select {
		case <-ended:
		case <-timeout:
			t.Fatalf("task %s did not end", taskID)
		}
	}
}

func lastText(e subagent.Event) string { return model.Text(e.LastAssistantMessage) }

func TestContinuable_FollowupAnswersFromTheSessionsContext(t *testing.T) {
	t.Parallel()
	p, b := continuable(t, "resume")
	w, _ := world(t, p, b)
	started := w.start(t, b, "alpha")
	if e := w.end(t, started.TaskID); e.StopReason != subagent.StopCompleted || lastText(e) != "remembered: " {
		t.Fatalf("first task ended %+v", e)
	}
	res := w.followup(t, started.ChildID, "beta")
	if res.Route != subagent.RouteStarted || res.TaskID == started.TaskID {
		t.Fatalf("followup = %+v, want a new task", res)
	}
	if e := w.end(t, res.TaskID); e.StopReason != subagent.StopCompleted || lastText(e) != "remembered: alpha" {
		t.Fatalf("followup task ended %+v, want the agent to remember alpha", e)
	}
	// The idle agent was taken up again: nothing had to be resumed.
	if marked(b, "resume") || marked(b, "load") {
		t.Fatal("the live agent was not reused")
	}
	if !p.CanResume() {
		t.Fatal("CanResume is false for an agent advertising sessionCapabilities.resume")
	}
}

func TestContinuable_ResumesAfterARestart(t *testing.T) {
	t.Parallel()
	for _, caps := range []string{"resume", "load"} {
		t.Run(caps, func(t *testing.T) {
			t.Parallel()
			p, b := continuable(t, caps)
			w, stop := world(t, p, b)
			started := w.start(t, b, "alpha")
			w.end(t, started.TaskID)
			stop() // the idle agent goes with the process

			p2, err := New(p.cfg, Deps{Store: b.store, Logger: p.log, WorkspaceRoots: []string{b.root}})
			if err != nil {
				t.Fatal(err)
			}
			w2, _ := world(t, p2, b)
			res := w2.followup(t, started.ChildID, "beta")
			if e := w2.end(t, res.TaskID); e.StopReason != subagent.StopCompleted || lastText(e) != "remembered: alpha" {
				t.Fatalf("followup after the restart ended %+v, want the agent to remember alpha", e)
			}
			if !marked(b, caps) {
				t.Fatalf("the agent got no session/%s", caps)
			}
			// session/load replays the conversation; it is not logged twice.
			for _, e := range events(t, b.store, started.ChildID) {
				if strings.Contains(string(e.Data), "replayed") {
					t.Fatalf("replayed history in the child log: %s %s", e.Type, e.Data)
				}
			}
			if n := countType(events(t, b.store, started.ChildID), sessionlog.EventUserMessage); n != 2 {
				t.Fatalf("%d user messages in the log, want 2", n)
			}
		})
	}
}

func countType(evs []store.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestContinuable_FollowupDuringATurnRunsAfterIt(t *testing.T) {
	t.Parallel()
	ready, waitReady := readyFIFO(t)
	release := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(release, 0o600); err != nil {
		t.Fatal(err)
	}
	p, b := continuable(t, "resume", func(c *config.ProviderConfig) {
		c.Env["FAKE_READY"], c.Env["FAKE_RELEASE"] = ready, release
	})
	w, _ := world(t, p, b)
	started := w.start(t, b, "block")
	waitReady()
	res := w.followup(t, started.ChildID, "beta")
	if res.Route != subagent.RouteQueued || res.TaskID != started.TaskID {
		t.Fatalf("followup during the turn = %+v, want queued in task %s", res, started.TaskID)
	}
	f, err := os.OpenFile(release, os.O_WRONLY, 0) // lets the blocked prompt finish
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	e := w.end(t, started.TaskID)
	if e.StopReason != subagent.StopCompleted || lastText(e) != "remembered: block" {
		t.Fatalf("task ended %+v, want the queued prompt answered after the first", e)
	}
	var msgs []string
	for _, ev := range events(t, b.store, started.ChildID) {
		var m sessionlog.UserMessage
		if ev.Type == sessionlog.EventUserMessage && json.Unmarshal(ev.Data, &m) == nil {
			msgs = append(msgs, model.Text(m.Content))
		}
	}
	if strings.Join(msgs, ",") != "block,beta" {
		t.Fatalf("user messages %q, want block then beta", msgs)
	}
}

func TestContinuable_InterruptCancelsTheTurn(t *testing.T) {
	t.Parallel()
	ready, waitReady := readyFIFO(t)
	p, b := continuable(t, "resume", func(c *config.ProviderConfig) { c.Env["FAKE_READY"] = ready })
	w, _ := world(t, p, b)
	started := w.start(t, b, "wait")
	waitReady()
	if err := w.m.Interrupt(context.Background(), parentID, started.ChildID); err != nil {
		t.Fatalf("Interrupt: %v", err)
	}
	if e := w.end(t, started.TaskID); e.StopReason != subagent.StopAborted {
		t.Fatalf("interrupted task ended %+v, want aborted", e)
	}
	if !marked(b, "cancel") {
		t.Fatal("the agent got no session/cancel")
	}
	// The session goes on.
	res := w.followup(t, started.ChildID, "beta")
	if e := w.end(t, res.TaskID); e.StopReason != subagent.StopCompleted {
		t.Fatalf("followup after the interrupt ended %+v", e)
	}
}

func TestContinuable_AgentWithoutResumeStaysOneShot(t *testing.T) {
	t.Parallel()
	p, b := continuable(t, "")
	w, _ := world(t, p, b)
	_, err := w.m.StartContinuable(context.Background(), children.ContinuableRequest{
		Provider: p.Name(), Label: "background", Prompt: textOutput("alpha"),
		Parent: subagent.Parent{Session: store.Session{ID: parentID, Cwd: b.root}},
	})
	if subagent.ErrorCode(err) != subagent.EUnsupportedCapability || !strings.Contains(subagent.ErrorMessage(err), "neither session/resume nor session/load") {
		t.Fatalf("StartContinuable = %v, want %s", err, subagent.EUnsupportedCapability)
	}
	if p.CanResume() {
		t.Fatal("CanResume is true for an agent without session persistence")
	}
	assertNoChild(t, b)
}

func TestContinuable_IdleAgentIsReleasedAndComesBackThroughResume(t *testing.T) {
	t.Parallel()
	// Idle time 0: the agent is stopped as soon as each activation settles,
	// before its subagent/end.
	p, b := continuable(t, "resume,close", func(c *config.ProviderConfig) { c.IdleTimeout = 0 })
	w, _ := world(t, p, b)
	started := w.start(t, b, "alpha")
	w.end(t, started.TaskID)
	if !marked(b, "close") {
		t.Fatal("the idle agent got no session/close")
	}
	res := w.followup(t, started.ChildID, "beta")
	if e := w.end(t, res.TaskID); lastText(e) != "remembered: alpha" {
		t.Fatalf("followup ended %+v, want the agent to remember alpha", e)
	}
	if !marked(b, "resume") {
		t.Fatal("the released agent did not come back through session/resume")
	}
}

// An agent that dies during a turn is replaced for the next queued turn,
// which resumes the session.
func TestContinuable_QueuedTurnAfterACrashResumesTheSession(t *testing.T) {
	t.Parallel()
	ready, waitReady := readyFIFO(t)
	release := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(release, 0o600); err != nil {
		t.Fatal(err)
	}
	p, b := continuable(t, "resume", func(c *config.ProviderConfig) {
		c.Env["FAKE_READY"], c.Env["FAKE_RELEASE"] = ready, release
		c.DisposeGrace = 100 * time.Millisecond
	})
	w, _ := world(t, p, b)
	started := w.start(t, b, "block")
	waitReady()
	for _, content := range []string{"crash", "beta"} {
		if res := w.followup(t, started.ChildID, content); res.Route != subagent.RouteQueued {
			t.Fatalf("followup %s = %+v, want queued", content, res)
		}
	}
	f, err := os.OpenFile(release, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if e := w.end(t, started.TaskID); lastText(e) != "remembered: block" {
		t.Fatalf("task ended %+v, want the last turn answered by a resumed agent", e)
	}
	if !marked(b, "resume") {
		t.Fatal("the replacement agent did not resume the session")
	}
	var reasons []string
	for _, ev := range events(t, b.store, started.ChildID) {
		var d sessionlog.TurnEndData
		if ev.Type == sessionlog.EventTurnEnd && json.Unmarshal(ev.Data, &d) == nil {
			reasons = append(reasons, d.Reason.Kind)
		}
	}
	if strings.Join(reasons, ",") != "completed,error,completed" {
		t.Fatalf("turn ends %q, want completed, error, completed", reasons)
	}
}

func TestContinuable_IdleTimeoutStopsTheAgent(t *testing.T) {
	t.Parallel()
	p, b := continuable(t, "resume,close", func(c *config.ProviderConfig) { c.IdleTimeout = time.Second })
	w, _ := world(t, p, b)
	started := w.start(t, b, "alpha")
	w.end(t, started.TaskID)
	p.idleMu.Lock()
	ia := p.idle[idleKey{store.DefaultTenant, started.ChildID}]
	p.idleMu.Unlock()
	if ia == nil {
		t.Fatal("no idle agent kept after the activation settled")
	}
	select {
	case <-ia.live.released:
	case <-time.After(wait):
		t.Fatal("the idle agent was not stopped after the idle timeout")
	}
	if !marked(b, "close") || alive(t, ia.live.proc.pgid) {
		t.Fatal("the idle agent was not closed and stopped")
	}
}
