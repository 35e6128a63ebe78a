package subagent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// Listener receives lifecycle events. An error or a panic from a listener
// of subagent/start, subagent/end or subagent/provider-removed is logged and
// ignored (R19); from a listener of subagent/provider-added it rolls the
// registration back (R3). Listeners may be called concurrently for
// different runs; the two events of one run arrive in order, the end only
// after every start listener returned, so a start listener must not wait
// for its run to settle.
type Listener func(ctx context.Context, e Event) error

// unrenderable stands for a panic value whose rendering itself panicked.
const unrenderable = "<unrenderable thrown value>"

// bus delivers lifecycle events to listeners, each scoped to one parent or
// to every event.
type bus struct {
	log  *slog.Logger
	mu   sync.Mutex
	next int
	subs []subscription // in subscription order
}

type subscription struct {
	id       int
	parentID string
	l        Listener
}

// subscribe adds l for events of parentID ("" = every event) and returns
// the func that removes it.
func (b *bus) subscribe(parentID string, l Listener) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.next
	b.next++
	b.subs = append(b.subs, subscription{id: id, parentID: parentID, l: l})
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			for i, s := range b.subs {
				if s.id == id {
					b.subs = append(b.subs[:i:i], b.subs[i+1:]...)
					return
				}
			}
		})
	}
}

// listeners returns, in subscription order, the listeners that observe e:
// unscoped listeners see every event, a listener scoped to a parent sees
// only that parent's run events (provider events are unscoped).
func (b *bus) listeners(e Event) []Listener {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Listener
	for _, s := range b.subs {
		if s.parentID == "" || (e.ParentID != "" && s.parentID == e.ParentID) {
			out = append(out, s.l)
		}
	}
	return out
}

// dispatch delivers e to every listener, containing each one: a failure is
// logged and delivery continues (R4, R19).
func (b *bus) dispatch(ctx context.Context, e Event) {
	for _, l := range b.listeners(e) {
		if err := call(ctx, l, e); err != nil {
			b.log.ErrorContext(ctx, "subagent lifecycle listener failed",
				slog.String("event", e.Type), slog.String("run_id", e.RunID),
				slog.String("provider", e.Provider), slog.String("error", render(err)))
		}
	}
}

// dispatchStrict delivers e until a listener fails and returns that
// failure (R3: provider-added is not contained).
func (b *bus) dispatchStrict(ctx context.Context, e Event) error {
	for _, l := range b.listeners(e) {
		if err := call(ctx, l, e); err != nil {
			return err
		}
	}
	return nil
}

// listenerPanic is a panic recovered from a listener.
type listenerPanic struct{ value any }

func (p listenerPanic) Error() string { return "listener panicked: " + render(p.value) }

// Unwrap returns the panic value when it is an error.
func (p listenerPanic) Unwrap() error {
	err, _ := p.value.(error)
	return err
}

// call runs l, turning a panic into an error.
func call(ctx context.Context, l Listener, e Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = listenerPanic{value: v}
		}
	}()
	return l(ctx, e)
}

// render turns a thrown value into text without letting its own Error or
// String method escape with a panic.
func render(v any) (s string) {
	defer func() {
		if recover() != nil {
			s = unrenderable
		}
	}()
	switch t := v.(type) {
	case error:
		return t.Error()
	case fmt.Stringer:
		return t.String()
	case string:
		return t
	}
	return fmt.Sprintf("%#v", v)
}
