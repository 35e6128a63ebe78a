// Package resident is the engine of resident agents (DESIGN §2): root
// sessions and continuable children alike are durable conversations whose
// in-process state is owned by one goroutine — a loop — that takes commands
// from a channel (STYLE A.11). Nothing else reads or writes that state, no
// lock guards it, and nothing polls it: work that waits (a steer's
// admission, a turn's end) waits off the loop and sends its outcome back as
// a command.
//
// A Group holds the loops of one kind of resident agent, one per key,
// started on the first command and ended once their state holds nothing
// live (Policy.Idle). What differs between roots and children — what
// "live" means, what else a loop listens to — is their Policy.
package resident

import (
	"context"
	"sync"
)

// Policy is what distinguishes one kind of resident agent: K keys its
// loops, S is a loop's state and T what it watches besides commands.
type Policy[K comparable, S, T any] struct {
	// New returns the fresh state of key's loop. Required.
	New func(key K) *S
	// Idle reports whether s holds nothing live, so that its loop may end
	// after a command; the next command for its key starts a new loop.
	// Required.
	Idle func(s *S) bool
	// Watch, when set, returns a channel the loop receives from besides its
	// commands and what to do with a value received on it; a nil channel
	// means nothing to watch now. It is called before each wait.
	Watch func(s *S) (<-chan T, func(ctx context.Context, s *S, v T))
	// Context returns the context a loop of key runs Watch handlers with
	// (its tenant, say); nil means context.Background.
	Context func(key K) context.Context
}

// Group runs one loop per key. Safe for concurrent use.
type Group[K comparable, S, T any] struct {
	policy Policy[K, S, T]

	mu    sync.Mutex
	loops map[K]*loop[S]
	wg    sync.WaitGroup // running loops
}

// loop is one resident agent's goroutine: it runs the commands sent on
// cmds and owns state; done is closed once it left Group.loops.
type loop[S any] struct {
	cmds  chan func(*S)
	done  chan struct{}
	state *S
}

// NewGroup returns an empty Group with policy p.
func NewGroup[K comparable, S, T any](p Policy[K, S, T]) *Group[K, S, T] {
	return &Group[K, S, T]{policy: p, loops: map[K]*loop[S]{}}
}

// Do runs f in key's loop, starting the loop when there is none, and
// returns once f returned.
func (g *Group[K, S, T]) Do(key K, f func(s *S)) {
	for {
		g.mu.Lock()
		l := g.loops[key]
		if l == nil {
			l = &loop[S]{cmds: make(chan func(*S)), done: make(chan struct{}), state: g.policy.New(key)}
			g.loops[key] = l
			g.wg.Add(1)
			go g.run(key, l)
		}
		g.mu.Unlock()
		if send(l, f) {
			return
		}
		// The loop ended meanwhile: the next round starts a new one.
	}
}

// Peek runs f in key's loop when one runs and reports whether it did; it
// never starts a loop.
func (g *Group[K, S, T]) Peek(key K, f func(s *S)) bool {
	g.mu.Lock()
	l := g.loops[key]
	g.mu.Unlock()
	return l != nil && send(l, f)
}

// Each runs f in every loop running now, one after the other.
func (g *Group[K, S, T]) Each(f func(s *S)) {
	g.mu.Lock()
	all := make([]*loop[S], 0, len(g.loops))
	for _, l := range g.loops {
		all = append(all, l)
	}
	g.mu.Unlock()
	for _, l := range all {
		send(l, f)
	}
}

// Wait returns once no loop runs, or ctx's error when it ends first.
func (g *Group[K, S, T]) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send runs f in l and reports whether it ran: false when l has ended.
func send[S any](l *loop[S], f func(*S)) bool {
	ran := make(chan struct{})
	select {
	case l.cmds <- func(s *S) { f(s); close(ran) }:
		<-ran
		return true
	case <-l.done:
		return false
	}
}

// run is the loop of key: commands and watched values, one at a time,
// until its state is idle.
func (g *Group[K, S, T]) run(key K, l *loop[S]) {
	defer g.wg.Done()
	ctx := context.Background()
	if g.policy.Context != nil {
		ctx = g.policy.Context(key)
	}
	for {
		var watched <-chan T
		var handle func(context.Context, *S, T)
		if g.policy.Watch != nil {
			watched, handle = g.policy.Watch(l.state)
		}
		select {
		case f := <-l.cmds:
			f(l.state)
		case v := <-watched:
			handle(ctx, l.state, v)
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
