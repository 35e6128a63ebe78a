package subagent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
)

func names(ps []Provider) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name())
	}
	return out
}

func TestRegistry_R1_DuplicateProvider(t *testing.T) {
	t.Parallel()
	first := &fakeProvider{name: "spawn"}
	svc, b := setup(t, first)
	err := svc.Register(t.Context(), &fakeProvider{name: "spawn"})
	if ErrorCode(err) != EDuplicateProvider {
		t.Fatalf("err = %v, want %s", err, EDuplicateProvider)
	}
	if got, ok := svc.Provider("spawn"); !ok || got != first {
		t.Errorf("Provider(spawn) = %v, %v; want the first registration", got, ok)
	}
	if got := b.rec.types(); len(got) != 0 {
		t.Errorf("a rejected registration dispatched %v", got)
	}
}

func TestRegistry_EmptyName(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t)
	if err := svc.Register(t.Context(), &fakeProvider{}); ErrorCode(err) != EInvalidRequest {
		t.Fatalf("err = %v, want %s", err, EInvalidRequest)
	}
}

// TestRegistry_ResumeNeedsAContinuableProvider: the resume capability is
// checked where it is declared, so nothing downstream asserts types.
func TestRegistry_ResumeNeedsAContinuableProvider(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t)
	p := &fakeProvider{name: "liar", caps: Capabilities{Resume: true}}
	if err := svc.Register(t.Context(), p); ErrorCode(err) != EInvalidRequest {
		t.Fatalf("err = %v, want %s", err, EInvalidRequest)
	}
	if _, ok := svc.Provider("liar"); ok {
		t.Fatal("a refused provider was registered")
	}
}

func TestRegistry_R2_ResolvableInRegistrationOrder(t *testing.T) {
	t.Parallel()
	svc, _ := setup(t, &fakeProvider{name: "spawn"}, &fakeProvider{name: "fork"}, &fakeProvider{name: "acp"})
	if got, want := names(svc.Providers()), []string{"spawn", "fork", "acp"}; !slices.Equal(got, want) {
		t.Errorf("Providers() = %v, want %v", got, want)
	}
	svc.Unregister(t.Context(), "fork")
	if err := svc.Register(t.Context(), &fakeProvider{name: "fork"}); err != nil {
		t.Fatal(err)
	}
	if got, want := names(svc.Providers()), []string{"spawn", "acp", "fork"}; !slices.Equal(got, want) {
		t.Errorf("after re-registration Providers() = %v, want %v", got, want)
	}
	if p, ok := svc.Provider("acp"); !ok || p.Name() != "acp" {
		t.Errorf("Provider(acp) = %v, %v", p, ok)
	}
}

func TestRegistry_R3_AddedAfterResolvable(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	resolvable := make(chan bool, 1)
	svc.Subscribe("", func(_ context.Context, e Event) error {
		if e.Type == EventProviderAdded {
			_, ok := svc.Provider(e.Provider)
			resolvable <- ok
		}
		return nil
	})
	if err := svc.Register(t.Context(), &fakeProvider{name: "spawn"}); err != nil {
		t.Fatal(err)
	}
	if !<-resolvable {
		t.Error("provider-added was dispatched before the provider was resolvable")
	}
	stored := b.store.events()
	if len(stored) != 1 || stored[0].Type != EventProviderAdded || string(stored[0].Payload) != `{"provider":"spawn"}` {
		t.Errorf("lifecycle log = %+v", stored)
	}
	if got := b.rec.all(); len(got) != 1 || got[0].Seq != stored[0].ID {
		t.Errorf("dispatched %+v, want Seq %d", got, stored[0].ID)
	}
}

func TestRegistry_R3_ListenerFailureRollsBack(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for name, l := range map[string]Listener{
		"error": func(context.Context, Event) error { return boom },
		"panic": func(context.Context, Event) error { panic(boom) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			svc, b := setup(t)
			later := newRecorder()
			unsubscribe := svc.Subscribe("", func(ctx context.Context, e Event) error {
				if e.Type == EventProviderAdded {
					return l(ctx, e)
				}
				return nil
			})
			svc.Subscribe("", later.listen)
			err := svc.Register(t.Context(), &fakeProvider{name: "spawn"})
			if !errors.Is(err, boom) {
				t.Fatalf("Register err = %v, want it to wrap %v", err, boom)
			}
			if _, ok := svc.Provider("spawn"); ok {
				t.Error("a rolled-back provider is still resolvable")
			}
			if len(svc.Providers()) != 0 {
				t.Error("a rolled-back provider is still listed")
			}
			// The earlier listener saw it arrive and leave; the durable log
			// stays balanced; the listener after the failing one never saw
			// it arrive.
			if got, want := b.rec.types(), []string{EventProviderAdded, EventProviderRemoved}; !slices.Equal(got, want) {
				t.Errorf("earlier listener saw %v, want %v", got, want)
			}
			if got := later.types(); !slices.Equal(got, []string{EventProviderRemoved}) {
				t.Errorf("later listener saw %v, want only the removal", got)
			}
			if n := len(b.store.events()); n != 2 {
				t.Errorf("lifecycle log has %d rows, want added+removed", n)
			}
			// The name is free again.
			unsubscribe()
			if err := svc.Register(t.Context(), &fakeProvider{name: "spawn"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRegistry_R3_RecordFailureRollsBack(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	b.store.failAppend = errors.New("db down")
	if err := svc.Register(t.Context(), &fakeProvider{name: "spawn"}); err == nil {
		t.Fatal("Register succeeded without recording provider-added")
	}
	if _, ok := svc.Provider("spawn"); ok {
		t.Error("provider stayed registered")
	}
	if got := b.rec.types(); len(got) != 0 {
		t.Errorf("dispatched %v", got)
	}
}

func TestRegistry_R4_UnregisterRemovesFirstThenEmitsContained(t *testing.T) {
	t.Parallel()
	svc, b := setup(t, &fakeProvider{name: "spawn"})
	stillResolvable := make(chan bool, 1)
	svc.Subscribe("", func(_ context.Context, e Event) error {
		if e.Type == EventProviderRemoved {
			_, ok := svc.Provider(e.Provider)
			stillResolvable <- ok
			return errors.New("listener failed")
		}
		return nil
	})
	svc.Subscribe("", func(_ context.Context, e Event) error {
		if e.Type == EventProviderRemoved {
			panic("listener panicked")
		}
		return nil
	})
	last := newRecorder()
	svc.Subscribe("", last.listen)

	svc.Unregister(t.Context(), "spawn")
	if <-stillResolvable {
		t.Error("provider-removed dispatched while the provider was still resolvable")
	}
	if got := last.types(); !slices.Equal(got, []string{EventProviderRemoved}) || last.all()[0].Provider != "spawn" {
		t.Errorf("listener after failing ones saw %+v", last.all())
	}
	if _, ok := svc.Provider("spawn"); ok {
		t.Error("unregistration did not complete")
	}
	if logs := b.logs.String(); !strings.Contains(logs, "listener failed") || !strings.Contains(logs, "listener panicked") {
		t.Errorf("failures not logged:\n%s", logs)
	}
	// Unknown names are a no-op.
	svc.Unregister(t.Context(), "nope")
	if n := len(b.store.events()); n != 2 {
		t.Errorf("lifecycle log has %d rows, want added+removed", n)
	}
}

func TestRegistry_R5_UnknownProvider(t *testing.T) {
	t.Parallel()
	removed := &fakeProvider{name: "gone"}
	svc, b := setup(t, removed)
	svc.Unregister(t.Context(), "gone")
	if p, ok := svc.Provider("nope"); ok || p != nil {
		t.Errorf("Provider(nope) = %v, %v; want absent", p, ok)
	}
	for _, name := range []string{"nope", "gone"} {
		_, err := svc.Start(t.Context(), name, request())
		if ErrorCode(err) != ENoProvider {
			t.Errorf("Start(%s) err = %v, want %s", name, err, ENoProvider)
		}
	}
	if removed.startCount() != 0 {
		t.Error("a removed provider was started")
	}
	for _, e := range b.store.events() {
		if IsRunEvent(e.Type) {
			t.Errorf("unexpected %s", e.Type)
		}
	}
}

func TestRegistry_R8_ProviderEventsMirror(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	scoped := newRecorder()
	svc.Subscribe("p1", scoped.listen)
	ctx := t.Context()
	if err := svc.Register(ctx, &fakeProvider{name: "a"}); err != nil {
		t.Fatal(err)
	}
	svc.Unregister(ctx, "a")
	if err := svc.Register(ctx, &fakeProvider{name: "a"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range b.rec.all() {
		got = append(got, e.Type+":"+e.Provider)
	}
	want := []string{EventProviderAdded + ":a", EventProviderRemoved + ":a", EventProviderAdded + ":a"}
	if !slices.Equal(got, want) {
		t.Errorf("unscoped listener saw %v, want %v", got, want)
	}
	if n := len(scoped.all()); n != 0 {
		t.Errorf("a parent-scoped listener saw %d provider events; they are unscoped", n)
	}
}

// TestRegistry_RestartRecordsOnlyChanges: a service that starts on the
// durable log of an earlier one records provider-added only for a provider
// that was not there, and provider-removed only for one that is gone; its
// listeners are still told of every registration.
func TestRegistry_RestartRecordsOnlyChanges(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	ctx := t.Context()
	start := func(names ...string) *recorder {
		t.Helper()
		svc := NewService(Config{Store: st, Logger: slog.New(slog.DiscardHandler), Owner: "r"})
		rec := newRecorder()
		svc.Subscribe("", rec.listen)
		for _, n := range names {
			if err := svc.Register(ctx, &fakeProvider{name: n}); err != nil {
				t.Fatal(err)
			}
		}
		if err := svc.RetireUnregistered(ctx); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	logged := func() []string {
		t.Helper()
		rows, err := st.Lifecycle(ctx, store.LifecycleFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			e, err := ParseEvent(r)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e.Type+":"+e.Provider)
		}
		return out
	}
	added, removed := EventProviderAdded+":", EventProviderRemoved+":"

	start("spawn", "acp")
	first := logged()
	if want := []string{added + "spawn", added + "acp"}; !slices.Equal(first, want) {
		t.Fatalf("first start logged %v, want %v", first, want)
	}
	rec := start("spawn", "acp")
	if got := logged(); !slices.Equal(got, first) {
		t.Fatalf("a restart with the same providers logged %v", got[len(first):])
	}
	if got := rec.all(); len(got) != 2 || got[0].Type != EventProviderAdded || got[0].Seq == 0 {
		t.Fatalf("listeners of the restart saw %+v, want both provider-added with their logged ids", got)
	}
	start("spawn", "fork")
	want := append(first, added+"fork", removed+"acp")
	if got := logged(); !slices.Equal(got, want) {
		t.Fatalf("a changed provider set logged %v, want %v", got, want)
	}
	start("spawn", "fork")
	if got := logged(); !slices.Equal(got, want) {
		t.Fatalf("a restart after the change logged %v", got[len(want):])
	}
}
