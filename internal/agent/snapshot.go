package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
)

// defaultSnapshotEvery is Config.SnapshotEvery when it is 0.
const defaultSnapshotEvery = 256

// loadPage is how many events one store read of load returns.
const loadPage = 1000

// load reads the log from its newest history/snapshot on (store.LogTail),
// or all of it when that snapshot does not decode, and replays it: a cold
// resume reads what follows the snapshot, not the whole log.
func (a *Agent) load(ctx context.Context, seedLength int) error {
	page, err := a.store.LogTail(ctx, a.id, loadPage)
	if err == nil && len(page) > 0 && page[0].Type == sessionlog.EventSnapshot {
		if _, derr := sessionlog.DecodeSnapshot(page[0]); derr != nil {
			a.log.Warn("unreadable history snapshot: reading the whole log", "seq", page[0].Seq, "error", derr)
			page, err = a.store.Events(ctx, a.id, -1, loadPage)
		}
	}
	for err == nil && len(page) > 0 {
		a.events = append(a.events, page...)
		if len(page) < loadPage {
			break // a short page ends the log
		}
		page, err = a.store.Events(ctx, a.id, page[len(page)-1].Seq, loadPage)
	}
	if err != nil {
		return fmt.Errorf("load log: %w", err)
	}
	return a.replay(seedLength)
}

// snapshotLocked appends a history/snapshot of the agent's state at a
// turn's end when the turn leaves enough behind the newest one: at least
// SnapshotEvery events, and as many bytes as that snapshot holds, so that
// writing snapshots costs at most about what they save a resume from
// reading. None is written while steers are pending (their cancellation
// comes first), nor one over store.MaxEventBytes: a resume then reads from
// an older snapshot. A failed write is logged; the log is whole without
// it. a.mu must be held.
func (a *Agent) snapshotLocked() {
	every := a.cfg.SnapshotEvery
	if every == 0 {
		every = defaultSnapshotEvery
	}
	tail := a.events[a.snap+1:]
	if every < 0 || len(a.steers) > 0 || len(tail) < every {
		return
	}
	size := 0
	for _, e := range tail {
		size += len(e.Data)
	}
	if size < a.snapSize {
		return
	}
	d := a.history.Snapshot()
	d.Turn, d.Queue, d.Logged = a.turn, a.queue, a.loggedLocked()
	if a.capture.committed {
		d.Structured = a.capture.value
	}
	ev, err := sessionlog.Encode(sessionlog.EventSnapshot, d)
	if err == nil && len(ev.Data) > store.MaxEventBytes {
		err = fmt.Errorf("%d bytes, over the %d an event may hold", len(ev.Data), store.MaxEventBytes)
	}
	if err == nil {
		err = a.appendLocked(ev)
	}
	if err != nil {
		a.log.Error("write history snapshot", "error", err)
		return
	}
	a.snap, a.snapSize = len(a.events)-1, len(ev.Data)
}

// loggedLocked returns the ids of the user/messages logged since the
// snapshot the agent loaded (SnapshotData.Logged), reading only the events
// it has not read for it yet. a.mu must be held.
func (a *Agent) loggedLocked() []string {
	for _, e := range a.events[a.loggedTo:] {
		var m sessionlog.UserMessage
		if e.Type == sessionlog.EventUserMessage && json.Unmarshal(e.Data, &m) == nil && m.ID != "" {
			a.logged = append(a.logged, m.ID)
		}
	}
	a.loggedTo = len(a.events)
	return a.logged
}
