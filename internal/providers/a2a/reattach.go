package a2a

import (
	"strings"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/sessionlog"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Reattaching a continuable child's turn. A turn is a task on the remote
// agent, which goes on working when the replica that followed it stops (a
// crash, a SIGKILL): the child's log then ends in an open turn whose task
// its a2a/task event names. The child's next materialization — on the
// replica that takes the child over (docs/architecture.md §5), or at its
// next followup — does not close that turn as cut off but follows the task
// again (follower.rejoin: SubscribeToTask, or tasks/get for an agent that
// cannot stream), journals what the log does not hold yet, and ends the
// turn as the task ended. A followup meanwhile queues behind it, in the
// same context.

var (
	_ subagent.Reattacher    = (*Provider)(nil)
	_ subagent.DetachedAgent = (*liveChild)(nil)
	_ subagent.Detacher      = (*liveChild)(nil)
)

// ReattachesTurns marks the provider as one whose children's turns outlive
// the replica that follows them (subagent.Reattacher).
func (p *Provider) ReattachesTurns() {}

// detachedTurn is a turn left open, as far as its log goes: its task, and
// what was journaled of it.
type detachedTurn struct {
	n         int
	task      sdk.TaskID
	contextID string
	// text is the turn's text chunks; status its last reasoning chunk,
	// the last status text journaled.
	text   strings.Builder
	status string
}

// logged notes e, an event of the log after the turn's a2a/task; d may be
// nil (no task named since the last turn/start).
func (d *detachedTurn) logged(e store.Event) {
	if d == nil || e.Type != sessionlog.EventAssistantChunk {
		return
	}
	c, err := sessionlog.Decode[sessionlog.ChunkData](e)
	if err != nil || c.Turn != d.n {
		return
	}
	switch c.Chunk.Type {
	case string(model.ChunkText):
		d.text.WriteString(c.Chunk.Text)
	case string(model.ChunkReasoning):
		d.status = c.Chunk.Text
	}
}

// Detached reports whether the log ended in a turn whose task Reattach has
// not followed yet.
func (r *liveChild) Detached() bool {
	r.Lock()
	defer r.Unlock()
	return r.detached != nil
}

// Reattach follows the detached turn, if any, as the running turn.
func (r *liveChild) Reattach() {
	r.Lock()
	defer r.Unlock()
	r.reattachLocked()
}

// reattachLocked starts following the detached turn and reports whether
// it did: not when there is none, the agent was closed or a turn runs.
// mu is held.
func (r *liveChild) reattachLocked() bool {
	d := r.detached
	if d == nil || !r.CanDriveLocked() {
		return false
	}
	r.detached = nil
	r.Kept.Rejoined(d.n)
	t := &a2aTurn{n: d.n, rejoin: true}
	logged := d.text.String()
	t.text.Add(logged)
	t.f = newFollower(r.LogCtx, r.p, r.c, r.Log, r.ID, d.n, r.recorder(t))
	t.f.taskID, t.f.contextID = d.task, d.contextID
	t.f.replay, t.f.replayStatus, t.f.wrote = logged, d.status, logged != ""
	r.cur = t
	r.DriveLocked()
	return true
}
