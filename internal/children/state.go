package children

import (
	"fmt"
	"slices"
)

// The lifecycles of a continuable child and of its activations, as the
// child's loop sees them. Each is one explicit state, changed only by
// the transition methods below, which refuse what the lifecycle does not
// allow: a reader finds here every state an activation or a child can be
// in and how it gets there.
//
//	activation  starting    → steering | queued | settled (rolled back)
//	            steering    → interrupted | settling
//	            queued      → interrupted | settling
//	            interrupted → settling
//	            settling    → settled
//	child       idle → live → owed; live, owed → idle (the activation settled)

// actState is where an activation is in its life. It only moves forward,
// along actNext.
type actState int

const (
	// actStarting: the run row and its start edge exist, the first
	// message is not accepted yet; the activation becomes live or rolls
	// back (R59, R60).
	actStarting actState = iota
	// actSteering: live, one turn at a time; a followup is steered into
	// its running turn (R96).
	actSteering
	// actQueued: live, started with several turns queued (a cold resume
	// of several messages); nothing is steered into it, so that no later
	// message overtakes them.
	actQueued
	// actInterrupted: Interrupt cancelled its turn (R101); nothing is
	// steered into it, and steers its turn rejected are parked (R102).
	actInterrupted
	// actSettling: its turn ended with nothing in flight and settle runs
	// (R67–R71): nothing more is delivered to it.
	actSettling
	// actSettled: ended; it is no longer its child's activation.
	actSettled
)

var actStateNames = [...]string{"starting", "steering", "queued", "interrupted", "settling", "settled"}

func (s actState) String() string { return actStateNames[s] }

// actNext lists the states each state may move to.
var actNext = map[actState][]actState{
	actStarting:    {actSteering, actQueued, actSettled},
	actSteering:    {actInterrupted, actSettling},
	actQueued:      {actInterrupted, actSettling},
	actInterrupted: {actSettling},
	actSettling:    {actSettled},
}

// to moves a to next and reports whether the lifecycle allows it; a
// refused transition leaves a unchanged. It runs in the child's loop.
func (a *activation) to(next actState) bool {
	if !slices.Contains(actNext[a.state], next) {
		return false
	}
	a.state = next
	return true
}

// mustTo is to for a transition the caller's own state guarantees; a
// refusal is a bug in the Manager and panics.
func (a *activation) mustTo(next actState) {
	if !a.to(next) {
		panic(fmt.Sprintf("subagent: activation %s of %s: illegal transition %s → %s", a.runID, a.c.key.ID, a.state, next))
	}
}

// takesTurns reports whether a accepts a message as its next turn: a
// Queuer's way of taking a followup.
func (a *activation) takesTurns() bool { return a.state == actSteering || a.state == actQueued }

// childState is whether a child has a live activation and whether a cold
// resume is owed once it settled.
type childState int

const (
	// childIdle: no live activation; a waking message cold-resumes the
	// child at once.
	childIdle childState = iota
	// childLive: c.act is live; messages are steered into it or wait.
	childLive
	// childOwed: c.act is live, and a message it did not take is owed to
	// the next activation, which its settlement starts (R90).
	childOwed
)

var childStateNames = [...]string{"idle", "live", "owed"}

func (s childState) String() string { return childStateNames[s] }

// activate makes act c's live activation, steering or queued; act leaves
// starting. It runs in c's loop and c is idle.
func (c *child) activate(act *activation, state actState) {
	if c.state != childIdle {
		panic(fmt.Sprintf("subagent: child %s: a second live activation", c.key.ID))
	}
	act.mustTo(state)
	c.act, c.state = act, childLive
}

// owe records that a message waits for the next activation. It is
// refused (false) when c has no live activation, which the caller must
// then start itself.
func (c *child) owe() bool {
	if c.state == childIdle {
		return false
	}
	c.state = childOwed
	return true
}

// settled ends c's live activation, which was settling, and reports
// whether a cold resume is owed. It runs in c's loop.
func (c *child) settled() (owed bool) {
	c.act.mustTo(actSettled)
	owed = c.state == childOwed
	c.act, c.state = nil, childIdle
	return owed
}
