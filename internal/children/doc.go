// Package children is the continuable-child kind of resident agent
// (docs/seam.md §11–§22, docs/architecture.md §3 and §5): the Manager
// starts continuable children, routes followups, steers, interrupts,
// settles activations, delivers reports and settlement notices, disposes
// and lists children, and recovers undelivered messages after a restart.
// Each child is driven by one loop of the resident engine
// (internal/resident), under its lease; requests for a child another
// replica drives go there through resident.Control. The seam's vocabulary
// — providers, runs, events, errors — is internal/subagent's.
//
// # Where a followup goes
//
// From the handler to the row in the child's log:
//
//  1. The handler — internal/http followupSubagent for POST
//     /v1/subagents/{childId}/followup, or the delegate tool's sendMessage —
//     calls Manager.Followup (followup.go).
//  2. Followup checks the request and builds the inbox row, then routes it
//     (followupRow, control.go → resident.Forward): when
//     another live replica holds the child's resident lease, the row goes
//     there as a control request (store.SendControl, woken by NOTIFY), that
//     replica runs the steps below, and its answer comes back through the
//     database. Otherwise followup, on this replica, sends one command to
//     the child's loop (resident.Group.DoContext: a loop that owns the
//     child's state; resident.Group.Hold claims the lease before an
//     activation starts, and the loop releases it once none is live): it
//     checks the parent and the descriptor (resumable), takes a live-run
//     slot when no activation is live, writes the inbox row (store.Enqueue)
//     — the message is accepted — and hands it to route.
//  3. route (followup.go) decides by the activation's state (state.go): a
//     steering activation running a turn gets it as a steer
//     (ChildAgent.SubmitSteer), whose admission track awaits off the loop
//     and sends back as a command (RouteSteered); a Queuer gets it as its
//     next turn (ChildAgent.FollowupMessage, RouteQueued); with no live
//     activation, resume → coldResume (activation.go) reads the inbox
//     (store.Pending), materializes the agent, records the run
//     (store.StartRun) and gives it each pending row as a turn
//     (RouteStarted); anything else — settling, interrupted, queued turns —
//     is owed to the next activation, which settle (settle.go) starts once
//     subagent/end is recorded.
//     FollowupAsync takes the same steps but returns once the row is
//     stored; announce (routed.go) then appends the route as lifecycle
//     event message/routed, on the replica that routed it.
//  4. The agent (internal/agent) logs the message as a user/message:
//     FollowupMessage at once when it opens a turn, an admitted steer when
//     the next model step starts (Agent.enterStep); both through
//     store.AppendEvents. Then the inbox row is acknowledged (Manager.ack,
//     store.Ack): on opening, on admission, or at settlement for messages
//     the activation logged.
package children
