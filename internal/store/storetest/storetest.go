// Package storetest is the conformance suite every store.Store passes (in the
// manner of river's riverdrivertest): one body of tests, run against
// internal/memstore and internal/pg, so both keep the same contract. It also
// holds a store wrapper other packages' tests share (RenewStore, renew.go).
package storetest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/store"
)

// Run exercises every method of store.Store and every error it documents.
// newStore returns an empty store for one subtest and arranges its cleanup;
// subtests run in parallel, each with its own store.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	for _, g := range []struct {
		name  string
		tests []test
	}{
		{"Sessions", sessionTests},
		{"Disposals", disposalTests},
		{"Search", searchTests},
		{"Events", eventTests},
		{"Runs", runTests},
		{"ChildRuns", childRunTests},
		{"Leases", leaseTests},
		{"Residents", residentTests},
		{"Lifecycle", lifecycleTests},
		{"Inbox", inboxTests},
		{"Tenants", tenantTests},
		{"Subscribe", subscribeTests},
		{"Idempotency", idempotencyTests},
		{"Signins", signinTests},
		{"Webhooks", webhookTests},
		{"Usage", usageTests},
		{"Approvals", approvalTests},
		{"Limits", limitTests},
	} {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, newStore(t))
				})
			}
		})
	}
	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		if err := newStore(t).Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
}

type test struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// t0 is a base time with whole microseconds, the precision every store keeps.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

// otherTenant is the tenant isolation tests hide rows from.
const otherTenant = "acme"

// sec returns t0 plus n seconds.
func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func other(ctx context.Context) context.Context { return store.WithTenant(ctx, otherTenant) }

// wakeTimeout bounds every wait for a wake-up; a healthy store takes
// milliseconds.
const wakeTimeout = 10 * time.Second

// waitWake fails t unless ch delivers a wake-up within wakeTimeout.
func waitWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wakeTimeout):
		t.Fatalf("no wake-up after %s within %v", what, wakeTimeout)
	}
}

// drain discards a pending wake-up, if any.
func drain(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// must returns v, or fails the test given to the returned func if err is set:
// must(s.GetRun(ctx, id))(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// isErr fails t unless err wraps want.
func isErr(t *testing.T, err, want error, call string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", call, err, want)
	}
}

// isInvalid fails t unless err reports bad input: an error that is neither
// ErrNotFound nor ErrConflict.
func isInvalid(t *testing.T, err error, call string) {
	t.Helper()
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("%s: got error %v, want an invalid-input error", call, err)
	}
}

// canonJSON re-encodes b with sorted keys and no spaces, so values a database
// normalised (jsonb) compare equal to what was written. nil stays nil.
func canonJSON(t *testing.T, b json.RawMessage) json.RawMessage {
	t.Helper()
	if b == nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stored JSON %q: %v", b, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// utc maps t to UTC with a nil location, so equal instants are DeepEqual.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// canonSession fills in a RootID the header was written without as a store
// does for a session whose parent it does not hold (the headers these tests
// compare have no stored parents): itself for a root, else its parent.
func canonSession(_ *testing.T, s store.Session) store.Session {
	s.CreatedAt = utc(s.CreatedAt)
	if s.RootID == "" {
		s.RootID = cmp.Or(s.ParentID, s.ID)
	}
	return s
}

func canonEvent(t *testing.T, e store.Event) store.Event {
	e.Time, e.Data = utc(e.Time), canonJSON(t, e.Data)
	return e
}

func canonRun(t *testing.T, r store.Run) store.Run {
	r.StartedAt, r.EndedAt, r.LeaseUntil = utc(r.StartedAt), utc(r.EndedAt), utc(r.LeaseUntil)
	r.Output, r.Structured = canonJSON(t, r.Output), canonJSON(t, r.Structured)
	return r
}

func canonLifecycle(t *testing.T, e store.LifecycleEvent) store.LifecycleEvent {
	e.Time, e.Payload = utc(e.Time), canonJSON(t, e.Payload)
	return e
}

func canonInbox(t *testing.T, m store.InboxMessage) store.InboxMessage {
	m.CreatedAt = utc(m.CreatedAt)
	m.Content, m.Source = canonJSON(t, m.Content), canonJSON(t, m.Source)
	return m
}

// same fails t unless got and want are equal after canon.
func same[T any](t *testing.T, what string, got, want T, canon func(*testing.T, T) T) {
	t.Helper()
	if g, w := canon(t, got), canon(t, want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got  %s\n want %s", what, show(g), show(w))
	}
}

// sameList is same for slices.
func sameList[T any](t *testing.T, what string, got, want []T, canon func(*testing.T, T) T) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d items, want %d:\n got  %s\n want %s", what, len(got), len(want), show(got), show(want))
	}
	for i := range got {
		same(t, fmt.Sprintf("%s[%d]", what, i), got[i], want[i], canon)
	}
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(b)
}

// recent fails t unless tm was set by the store between before and now.
func recent(t *testing.T, what string, tm, before time.Time) {
	t.Helper()
	if tm.Before(before.Truncate(time.Microsecond)) || tm.After(time.Now()) {
		t.Fatalf("%s = %v, want the store's clock (between %v and now)", what, tm, before)
	}
}
