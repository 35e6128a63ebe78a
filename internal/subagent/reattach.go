package subagent

import "github.com/subagentd/subagentd/internal/store"

// Reattaching a turn that outlived its replica. A remote agent's turn (an
// A2A task) runs on the remote agent, not in the replica that follows it:
// when that replica dies its activation is closed as owner lost (R130),
// but the remote work goes on, and the child's log ends in a turn still
// open. The replica that takes the child over (resident.Control's
// TakeOverLapsed) resumes such a child even with nothing undelivered, and
// its cold resume (internal/children) starts an activation whose running
// turn is that one, followed again (DetachedAgent); a child nobody took over is reattached at its next
// activation, before its followup runs (docs/architecture.md §5).

// Reattacher is a ContinuableProvider whose children's turns may outlive
// the replica that follows them.
type Reattacher interface {
	ContinuableProvider
	// ReattachesTurns marks the provider.
	ReattachesTurns()
}

// DetachedAgent is a ChildAgent that may be materialized over a log
// ending in such a turn.
type DetachedAgent interface {
	ChildAgent
	// Detached reports whether the agent's log ends in a turn whose
	// remote work is to be followed again.
	Detached() bool
	// Reattach follows that turn as the agent's running turn, journaling
	// what the log lacks, until it ends as the remote work did. Call it
	// after Track: the turn's end is the activation's.
	Reattach()
}

// Reattaches reports whether provider's children may hold a detached
// turn.
func (s *Service) Reattaches(provider string) bool {
	p, ok := s.Provider(provider)
	if !ok {
		return false
	}
	_, ok = p.(Reattacher)
	return ok
}

// Detacher is a ChildAgent whose running turn's work goes on without it
// (a remote agent's task). A replica that is about to lose the child's
// lease (fenced: it could not renew it) detaches the turn instead of
// cancelling it: the agent stops following the work, writes nothing more
// and leaves the turn open in the log, so that whichever replica drives the
// child next rejoins it (DetachedAgent).
type Detacher interface {
	ChildAgent
	Detach()
}

// resumesLapsed is the Control's ControlConfig.Resumes: a lapsed child of
// a Reattacher is taken over although its inbox is empty.
func (s *Service) resumesLapsed(sess store.Session) bool { return s.Reattaches(sess.Provider) }
