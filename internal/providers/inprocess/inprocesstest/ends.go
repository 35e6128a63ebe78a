package inprocesstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/subagent"
)

// Ends records the subagent/end events a Service dispatches, by task id,
// so that a test waits for an activation's end on a signal, not a poll.
type Ends struct {
	mu     sync.Mutex
	byTask map[string]subagent.Event
	ended  chan struct{} // closed and replaced on every end
}

// WatchEnds subscribes to svc's ends.
func WatchEnds(svc *subagent.Service) *Ends {
	e := &Ends{byTask: map[string]subagent.Event{}, ended: make(chan struct{})}
	svc.Subscribe("", func(_ context.Context, ev subagent.Event) error {
		if ev.Type == subagent.EventEnd {
			e.mu.Lock()
			e.byTask[ev.TaskID] = ev
			close(e.ended)
			e.ended = make(chan struct{})
			e.mu.Unlock()
		}
		return nil
	})
	return e
}

// Wait returns the subagent/end of taskID, or any end when taskID is
// empty; it fails t after Timeout.
func (e *Ends) Wait(t testing.TB, taskID string) subagent.Event {
	t.Helper()
	timeout := time.After(Timeout)
	for {
		e.mu.Lock()
		ev, ok := e.byTask[taskID]
		if taskID == "" {
			for _, ev = range e.byTask {
				ok = true
			}
		}
		ended := e.ended
		e.mu.Unlock()
		if ok {
			return ev
		}
		select {
		case <-ended:
		case <-timeout:
			t.Fatalf("task %q did not end", taskID)
		}
	}
}
