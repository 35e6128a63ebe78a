// Package resident is the engine of resident agents:
// root sessions and continuable children alike are durable conversations
// whose in-process state is owned by one goroutine — a loop — that takes
// commands from a channel. Nothing else reads or writes that state, no
// lock guards it, and nothing polls it: work that waits (a steer's
// admission, a turn's end) waits off the loop and sends its outcome back as
// a command.
//
// A Group holds the loops of one kind of resident agent, one per Key,
// started on the first command and ended once their state holds nothing
// live (Policy.Idle). The Group also keeps each agent's resident lease
// (Hold, released by the loop itself once its state drives nothing), takes
// over agents whose owner was lost (TakeOver), recovers accepted messages
// at start-up (Recover) and stops driving everything when this replica is
// fenced (Fence). What differs between roots and children — what "live"
// and "driving" mean, how pending messages are delivered, what else a loop
// listens to — is their Policy.
package resident

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/subagentd/subagentd/internal/store"
)

// Policy is what distinguishes one kind of resident agent: S is a loop's
// state and T what it watches besides commands.
type Policy[S, T any] struct {
	// Kind names the kind: it is the holder of its agents' leases in
	// Leases. Required.
	Kind string
	// Leases is this process's lease registry; nil means a single process
	// without leases.
	Leases *Leases
	// New returns the fresh state of key's loop. Required.
	New func(key Key) *S
	// Idle reports whether s holds nothing live, so that its loop may end
	// after a command; the next command for its key starts a new loop.
	// Required.
	Idle func(s *S) bool
	// Driving reports whether s still drives its agent, so that its loop
	// keeps the lease it took (Hold); once it does not, after a command,
	// the loop releases it. Required.
	Driving func(s *S) bool
	// Watch, when set, returns a channel the loop receives from besides its
	// commands and what to do with a value received on it; a nil channel
	// means nothing to watch now. It is called before each wait.
	Watch func(s *S) (<-chan T, func(ctx context.Context, s *S, v T))
	// Owns reports whether session sess is of this kind. Required.
	Owns func(sess store.Session) bool
	// Resume delivers, in s's loop, the accepted messages the agent's log
	// lacks (start-up recovery, a takeover). Required.
	Resume func(ctx context.Context, s *S) error
	// Stop stops driving s at once, in its loop: this replica is about to
	// lose its leases (Fence). Required.
	Stop func(ctx context.Context, s *S)
	// Outbox, when set, takes from s, in its loop after each command, what
	// the command decided to run once it returned (lifecycle dispatches
	// that may call back into the Group): the sender of the command runs
	// them, in order, off the loop.
	Outbox func(s *S) []func()
}

// Group runs one loop per key. Safe for concurrent use.
type Group[S, T any] struct {
	policy Policy[S, T]

	mu    sync.Mutex
	loops map[Key]*loop[S]
	wg    sync.WaitGroup // running loops
}

// loop is one resident agent's goroutine: it runs the commands sent on
// cmds and owns state; done is closed once it left Group.loops.
type loop[S any] struct {
	cmds  chan command[S]
	done  chan struct{}
	state *S
}

// command is f, to run in a loop; ran is closed once it ran and the loop
// settled its lease, and out is then what its sender runs (Policy.Outbox).
type command[S any] struct {
	f   func(*S)
	ran chan struct{}
	out *[]func()
}

// NewGroup returns an empty Group with policy p.
func NewGroup[S, T any](p Policy[S, T]) *Group[S, T] {
	return &Group[S, T]{policy: p, loops: map[Key]*loop[S]{}}
}

// Do runs f in key's loop, starting the loop when there is none, and
// returns once f returned.
func (g *Group[S, T]) Do(key Key, f func(s *S)) {
	g.do(nil, key, f)
}

// DoContext is Do bounded by ctx: when ctx ends before key's loop took f
// (it is busy with a long command), f never runs and ctx's error is
// returned, so that a request never waits unboundedly for a loop. Once
// taken, f runs to its end.
func (g *Group[S, T]) DoContext(ctx context.Context, key Key, f func(s *S)) error {
	if !g.do(ctx.Done(), key, f) {
		return fmt.Errorf("waiting for the loop of %s: %w", key.ID, context.Cause(ctx))
	}
	return nil
}

// do is Do, giving up — and reporting false — once stop is closed before
// the loop took f.
func (g *Group[S, T]) do(stop <-chan struct{}, key Key, f func(s *S)) bool {
	for {
		g.mu.Lock()
		l := g.loops[key]
		if l == nil {
			l = &loop[S]{cmds: make(chan command[S]), done: make(chan struct{}), state: g.policy.New(key)}
			g.loops[key] = l
			g.wg.Add(1)
			go g.run(key, l)
		}
		g.mu.Unlock()
		switch g.send(stop, l, f) {
		case sent:
			return true
		case stopped:
			return false
		}
		// The loop ended meanwhile: the next round starts a new one.
	}
}

// Peek runs f in key's loop when one runs and reports whether it did; it
// never starts a loop.
func (g *Group[S, T]) Peek(key Key, f func(s *S)) bool {
	g.mu.Lock()
	l := g.loops[key]
	g.mu.Unlock()
	return l != nil && g.send(nil, l, f) == sent
}

// Each runs f in every loop running now, one after the other.
func (g *Group[S, T]) Each(f func(s *S)) {
	g.mu.Lock()
	all := make([]*loop[S], 0, len(g.loops))
	for _, l := range g.loops {
		all = append(all, l)
	}
	g.mu.Unlock()
	for _, l := range all {
		g.send(nil, l, f)
	}
}

// Wait returns once no loop runs, or ctx's error when it ends first.
func (g *Group[S, T]) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hold takes key's resident lease for this kind before its loop drives
// the agent; it runs in key's loop. Returns ErrHeldElsewhere when another
// replica holds it live, ErrHeldByOtherKind when a loop of another kind
// holds it in this process. The loop releases it once its state no longer
// drives the agent (Policy.Driving).
func (g *Group[S, T]) Hold(ctx context.Context, key Key) error {
	return g.policy.Leases.Hold(ctx, key, g.policy.Kind)
}

// Reclaim claims key's lease again for the loop that holds it, after a
// write of its agent found itself fenced; it runs in key's loop. Returns
// ErrHeldElsewhere when another replica took the agent over meanwhile.
func (g *Group[S, T]) Reclaim(ctx context.Context, key Key) error {
	return g.policy.Leases.Reclaim(ctx, key, g.policy.Kind)
}

// TakeOver resumes sess, a resident agent whose owner's lease lapsed and
// which has undelivered messages, if it is of this kind, and reports
// whether it was. from is who claimed its lease for the takeover: the
// lease passes to this kind in the agent's loop, which releases it once
// it drives nothing.
func (g *Group[S, T]) TakeOver(ctx context.Context, sess store.Session, from string) (bool, error) {
	if !g.policy.Owns(sess) {
		return false, nil
	}
	key := Key{store.Tenant(ctx), sess.ID}
	var err error
	g.Do(key, func(s *S) {
		g.policy.Leases.Pass(key, from, g.policy.Kind)
		err = g.policy.Resume(ctx, s)
	})
	return true, err
}

// Fence stops driving every agent of this kind at once (Policy.Stop):
// this replica could not renew its leases, which are about to lapse.
func (g *Group[S, T]) Fence(ctx context.Context) {
	g.Each(func(s *S) { g.policy.Stop(ctx, s) })
}

// Recover delivers, at start-up, the messages accepted for every agent of
// this kind before the previous process stopped (Policy.Resume), reading
// the durable inbox of st (see RecoverInboxes).
func (g *Group[S, T]) Recover(ctx context.Context, st store.Store, log *slog.Logger) error {
	return RecoverInboxes(ctx, st, log, func(ctx context.Context, sess store.Session) error {
		if !g.policy.Owns(sess) {
			return nil // another kind recovers it
		}
		var err error
		g.Do(Key{store.Tenant(ctx), sess.ID}, func(s *S) { err = g.policy.Resume(ctx, s) })
		return err
	})
}

// sendResult says what became of a command sent to a loop.
type sendResult int

const (
	sent    sendResult = iota // it ran
	ended                     // the loop had ended
	stopped                   // the sender stopped waiting before the loop took it
)

// send runs f in l, then what f left in its outbox, unless l has ended or
// stop is closed before l takes f.
func (g *Group[S, T]) send(stop <-chan struct{}, l *loop[S], f func(*S)) sendResult {
	var out []func()
	ran := make(chan struct{})
	select {
	case l.cmds <- command[S]{f, ran, &out}:
		<-ran
	case <-l.done:
		return ended
	case <-stop:
		return stopped
	}
	for _, run := range out {
		run()
	}
	return sent
}

// run is the loop of key: commands and watched values, one at a time,
// until its state is idle. After each, a state that drives nothing gives
// its lease back: only this loop, the holder, releases it.
func (g *Group[S, T]) run(key Key, l *loop[S]) {
	defer g.wg.Done()
	ctx := store.WithTenant(context.Background(), key.Tenant)
	for {
		var watched <-chan T
		var handle func(context.Context, *S, T)
		if g.policy.Watch != nil {
			watched, handle = g.policy.Watch(l.state)
		}
		var ran chan struct{}
		select {
		case c := <-l.cmds:
			c.f(l.state)
			if g.policy.Outbox != nil {
				*c.out = g.policy.Outbox(l.state)
			}
			ran = c.ran
		case v := <-watched:
			handle(ctx, l.state, v)
		}
		if !g.policy.Driving(l.state) {
			g.policy.Leases.Release(ctx, key, g.policy.Kind)
		}
		if ran != nil {
			close(ran)
		}
		if g.policy.Idle(l.state) {
			g.mu.Lock()
			if g.loops[key] == l {
				delete(g.loops, key)
			}
			g.mu.Unlock()
			close(l.done)
			return
		}
	}
}
