package webhooks

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/subagentd/subagentd/internal/pg"
	"github.com/subagentd/subagentd/internal/pg/pgtest"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// openPG returns a pg.Store on the database at url, closed when t ends.
func openPG(t testing.TB, url string) *pg.Store {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := pg.New(t.Context(), pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// pgEvents creates the sessions root → mid → child and appends n
// subagent/start events of runs run-1 … run-n.
func pgEvents(t testing.TB, st *pg.Store, n int) []store.LifecycleEvent {
	t.Helper()
	ctx := t.Context()
	for _, s := range []store.Session{{ID: "root"}, {ID: "mid", ParentID: "root"}, {ID: "child", ParentID: "mid", Origin: "subagent"}} {
		if err := st.CreateSession(ctx, s); err != nil && !errors.Is(err, store.ErrConflict) {
			t.Fatal(err)
		}
	}
	out := make([]store.LifecycleEvent, n)
	for i := range n {
		e := subagent.Event{Type: subagent.EventStart, RunID: "run-" + strconv.Itoa(i+1), ID: "child", ParentID: "mid", Provider: "spawn"}
		payload, err := subagent.EventPayload(e)
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = st.AppendLifecycle(ctx, store.LifecycleEvent{Type: e.Type, ParentID: e.ParentID, RunID: e.RunID, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// mortal is a Store that dies on kill: from then on every call fails, as
// the calls of a SIGKILLed process never reach the database. Its leases
// stay where they were.
type mortal struct {
	Store
	dead atomic.Bool
}

var errKilled = errors.New("killed")

func (m *mortal) ClaimWebhooks(ctx context.Context, p store.ClaimWebhooksParams) ([]store.Webhook, error) {
	if m.dead.Load() {
		return nil, errKilled
	}
	return m.Store.ClaimWebhooks(ctx, p)
}

func (m *mortal) AdvanceWebhook(ctx context.Context, p store.AdvanceWebhookParams) error {
	if m.dead.Load() {
		return errKilled
	}
	return m.Store.AdvanceWebhook(ctx, p)
}

func (m *mortal) ReleaseWebhook(ctx context.Context, id, owner string) error {
	if m.dead.Load() {
		return errKilled
	}
	return m.Store.ReleaseWebhook(ctx, id, owner)
}

// TestPG_KilledDelivererMidBacklog: a deliverer dies (its writes stop, its
// lease stays) while an attempt is in flight in the middle of a backlog;
// a deliverer of a new process on a new Store takes the endpoint over once
// the lease lapsed and delivers every event at least once, in log order,
// the interrupted one again.
func TestPG_KilledDelivererMidBacklog(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	stA := openPG(t, url)
	const n, stuck = 30, 10
	var mu sync.Mutex
	var ids []string
	blocked, ended := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then a client that goes away ends r.Context()
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		count := len(ids)
		mu.Unlock()
		if count == stuck {
			// The first process dies while this attempt is in flight.
			once.Do(func() { close(blocked) })
			select {
			case <-r.Context().Done():
			case <-ended: // the test failed before the abandoned attempt was noticed
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(ended) })

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	a := &mortal{Store: stA}
	cfg := Config{Logger: logger, AllowPrivate: true, Timeout: time.Second, Poll: 100 * time.Millisecond, Retry: []time.Duration{10 * time.Millisecond}}
	cfgA := cfg
	cfgA.Store, cfgA.Owner = a, "a"
	svcA := New(cfgA)
	w, err := svcA.Create(t.Context(), CreateParams{URL: srv.URL, Events: []string{RunStarted}})
	if err != nil {
		t.Fatal(err)
	}
	evs := pgEvents(t, stA, n)
	svcA.Start(t.Context())
	select {
	case <-blocked:
	case <-time.After(deadline):
		t.Fatalf("the backlog did not reach event %d within %v", stuck, deadline)
	}
	a.dead.Store(true)
	svcA.Stop()
	if held, err := stA.GetWebhook(t.Context(), w.ID); err != nil || held.Owner != "a" || held.Cursor != evs[stuck-2].ID {
		t.Fatalf("after the kill the endpoint is %+v, %v; want a's lease with the cursor at event %d", held, err, stuck-1)
	}

	cfgB := cfg
	cfgB.Store, cfgB.Owner = openPG(t, url), "b"
	svcB := New(cfgB)
	svcB.Start(t.Context())
	t.Cleanup(svcB.Stop)
	want := make([]string, n)
	for i, e := range evs {
		want[i] = eventID(e)
	}
	ch, end := cfgB.Store.Subscribe(store.WebhooksTopic)
	defer end()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(deadline)
	for {
		mu.Lock()
		got := slices.Compact(slices.Clone(ids))
		mu.Unlock()
		if len(got) >= n {
			if !slices.Equal(got, want) {
				t.Fatalf("received (duplicates in a row merged) %v, want %v", got, want)
			}
			break
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-timeout:
			t.Fatalf("received %v after %v, want all %d", got, deadline, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if c := strings.Count(strings.Join(ids, " "), want[stuck-1]+" "); c < 2 {
		t.Fatalf("the interrupted event %s was sent %d times, want it again after the takeover: %v", want[stuck-1], c, ids)
	}
}

// TestPG_TwoDeliverersNeverOverlap: two deliverers (two Services, each on
// its own Store, as two replicas) on one database deliver each event of
// each endpoint once, in log order, and never two requests to one endpoint
// at once.
func TestPG_TwoDeliverersNeverOverlap(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	const endpoints, n = 3, 40
	var mu sync.Mutex
	got := map[string][]string{}
	inflight := map[string]*atomic.Int32{}
	var overlaps atomic.Int32
	done := make(chan struct{}, endpoints*n)
	for e := range endpoints {
		inflight["/e"+strconv.Itoa(e)] = &atomic.Int32{}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := inflight[r.URL.Path]
		if c.Add(1) > 1 {
			overlaps.Add(1)
		}
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("webhook-id"))
		mu.Unlock()
		c.Add(-1)
		w.WriteHeader(http.StatusOK)
		done <- struct{}{}
	}))
	t.Cleanup(srv.Close)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var svcs []*Service
	var stores []*pg.Store
	for _, owner := range []string{"a", "b"} {
		st := openPG(t, url)
		stores = append(stores, st)
		svcs = append(svcs, New(Config{Store: st, Logger: logger, Owner: owner, AllowPrivate: true, Retry: []time.Duration{10 * time.Millisecond}}))
	}
	for e := range endpoints {
		if _, err := svcs[e%2].Create(t.Context(), CreateParams{URL: srv.URL + "/e" + strconv.Itoa(e), Events: []string{RunStarted}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, svc := range svcs {
		svc.Start(t.Context())
		t.Cleanup(svc.Stop)
	}
	evs := pgEvents(t, stores[0], n)
	want := make([]string, n)
	for i, e := range evs {
		want[i] = eventID(e)
	}
	timeout := time.After(deadline)
	for range endpoints * n {
		select {
		case <-done:
		case <-timeout:
			t.Fatalf("not every delivery arrived within %v: %v", deadline, got)
		}
	}
	for _, svc := range svcs {
		svc.Stop()
	}
	mu.Lock()
	defer mu.Unlock()
	for e := range endpoints {
		path := "/e" + strconv.Itoa(e)
		if !slices.Equal(got[path], want) {
			t.Errorf("endpoint %s received %v, want each event once in order %v", path, got[path], want)
		}
	}
	if o := overlaps.Load(); o > 0 {
		t.Errorf("%d requests overlapped another to the same endpoint", o)
	}
}
