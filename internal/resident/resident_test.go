package resident

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// counter is a test state: live while n > 0, watching ch when set.
type counter struct {
	key  Key
	n    int
	ch   chan error
	seen []error
}

func newGroup() *Group[counter, error] {
	idle := func(s *counter) bool { return s.n == 0 && s.ch == nil }
	return NewGroup(Policy[counter, error]{
		New:     func(key Key) *counter { return &counter{key: key} },
		Idle:    idle,
		Driving: func(s *counter) bool { return !idle(s) },
		Watch: func(s *counter) (<-chan error, func(context.Context, *counter, error)) {
			return s.ch, func(_ context.Context, s *counter, err error) {
				s.seen = append(s.seen, err)
				s.ch = nil
			}
		},
	})
}

func TestGroup_OneLoopOwnsAKeyUntilIdle(t *testing.T) {
	t.Parallel()
	g := newGroup()
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { g.Do(Key{ID: "a"}, func(s *counter) { s.n++ }) })
	}
	wg.Wait()
	var n int
	if !g.Peek(Key{ID: "a"}, func(s *counter) { n = s.n }) || n != 100 {
		t.Fatalf("after 100 concurrent increments: live %v, n %d", n != 0, n)
	}
	g.Do(Key{ID: "a"}, func(s *counter) { s.n = 0 }) // idle: the loop ends
	if err := g.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if g.Peek(Key{ID: "a"}, func(*counter) {}) {
		t.Fatal("Peek found the loop of an idle state")
	}
	g.Do(Key{ID: "a"}, func(s *counter) {
		if s.n != 0 {
			t.Errorf("a new loop started with n %d", s.n)
		}
	})
}

func TestGroup_WatchedValueIsHandledInTheLoop(t *testing.T) {
	t.Parallel()
	g := newGroup()
	ch := make(chan error) // unbuffered: the send returns once the loop took it
	g.Do(Key{ID: "w"}, func(s *counter) { s.n, s.ch = 1, ch })
	boom := errors.New("boom")
	ch <- boom
	var seen []error
	g.Peek(Key{ID: "w"}, func(s *counter) { seen = s.seen })
	if len(seen) != 1 || seen[0] != boom {
		t.Fatalf("handled %v, want [boom]", seen)
	}
	g.Do(Key{ID: "w"}, func(s *counter) { s.n = 0 })
	if err := g.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	var each int
	g.Each(func(*counter) { each++ })
	if each != 0 {
		t.Errorf("Each ran in %d loops after all ended", each)
	}
}

func TestGroup_WaitReturnsCtxErr(t *testing.T) {
	t.Parallel()
	g := newGroup()
	g.Do(Key{ID: "live"}, func(s *counter) { s.n = 1 })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a live loop and a done ctx: %v", err)
	}
	var seen []string
	g.Each(func(s *counter) { seen = append(seen, s.key.ID); s.n = 0 })
	if len(seen) != 1 || seen[0] != "live" {
		t.Errorf("Each saw %v", seen)
	}
	if err := g.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestGroup_DoContextGivesUpOnABusyLoop: while a loop runs a long
// command, a command sent with a context that ends is never run and its
// sender is answered with the context's error; the loop then takes the
// next command as usual.
func TestGroup_DoContextGivesUpOnABusyLoop(t *testing.T) {
	t.Parallel()
	g := newGroup()
	k := Key{ID: "busy"}
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Do(k, func(s *counter) { s.n = 1; close(inside); <-release })
	}()
	<-inside
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ran := false
	if err := g.DoContext(ctx, k, func(*counter) { ran = true }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("DoContext on a busy loop with a done ctx: %v, ran %v", err, ran)
	}
	close(release)
	<-done
	if err := g.DoContext(t.Context(), k, func(s *counter) { s.n = 0 }); err != nil {
		t.Fatalf("DoContext on a free loop: %v", err)
	}
	if err := g.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}
