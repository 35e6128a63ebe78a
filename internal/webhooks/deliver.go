package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// Start starts delivering in the background until Stop. It returns at once.
func (s *Service) Start(ctx context.Context) {
	ctx, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	go s.loop(ctx)
}

// Stop ends delivering: attempts in flight are abandoned (and made again
// by whichever deliverer claims the endpoint next), leases are released.
// It waits for the workers. Idempotent; a no-op before Start.
func (s *Service) Stop() {
	if s.stop == nil {
		return
	}
	s.stop()
	<-s.done
}

// loop claims endpoints with due work whenever the lifecycle log or the
// endpoints change, a worker ends, a retry it scheduled is due, or the
// poll interval passes, and hands each to a worker. A new lifecycle event
// claims only while some endpoint is enabled, which every other wake-up
// looks up again: a service with no endpoints (or only disabled ones)
// costs the store nothing per event.
func (s *Service) loop(ctx context.Context) {
	defer close(s.done)
	events, endEvents := s.st.Subscribe(store.LifecycleTopic)
	defer endEvents()
	hooks, endHooks := s.st.Subscribe(store.WebhooksTopic)
	defer endHooks()
	var workers sync.WaitGroup
	defer workers.Wait()
	sweep := time.Now()
	var measured time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	enabled := false
	for {
		event := false
		select {
		case <-ctx.Done():
			return
		case <-events:
			event = true
		case <-hooks:
		case <-s.kick:
		case <-timer.C:
		}
		now := time.Now()
		if !event {
			var err error
			// Unknown (the store failed): claim, which says why.
			if enabled, err = s.st.WebhooksEnabled(ctx); err != nil {
				enabled = true
			}
		}
		if enabled {
			s.claim(ctx, now, &workers)
		}
		if s.metrics != nil && now.Sub(measured) >= s.poll {
			measured = now
			s.measure(ctx, now)
		}
		if now.Sub(sweep) > time.Hour {
			sweep = now
			if _, err := s.st.SweepWebhookDeliveries(ctx, now.Add(-DeliveryRetention)); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "webhooks: sweep the delivery log", slog.Any("error", err))
			}
		}
		timer.Reset(s.next(now))
	}
}

// measure reads the backlog of every enabled endpoint into the metrics.
func (s *Service) measure(ctx context.Context, now time.Time) {
	b, err := s.st.WebhookBacklog(ctx, backlogCap)
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "webhooks: read the backlog", slog.Any("error", err))
		}
		return
	}
	var age time.Duration
	if !b.Oldest.IsZero() {
		age = now.Sub(b.Oldest)
	}
	s.metrics.WebhookBacklog(b.Events, age)
}

// next is how long the loop waits without a wake-up: until the earliest
// retry this process scheduled, at most the poll interval.
func (s *Service) next(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := s.poll
	if !s.due.IsZero() {
		wait = min(wait, max(s.due.Sub(now), 0))
		if !s.due.After(now) {
			s.due = time.Time{}
		}
	}
	return wait
}

// claim leases the endpoints with due work, up to the free workers, and
// starts a worker on each that no worker of this process served while the
// claim read it: such a worker may have moved the endpoint's cursor past
// what the claim read (this process may claim its own lease again), and a
// worker started from that would send those events a second time. The
// endpoint is claimed afresh once its worker is done.
func (s *Service) claim(ctx context.Context, now time.Time, workers *sync.WaitGroup) {
	s.mu.Lock()
	free := maxWorkers - len(s.active)
	serving := maps.Clone(s.active)
	s.mu.Unlock()
	if free <= 0 {
		return
	}
	list, err := s.st.ClaimWebhooks(ctx, store.ClaimWebhooksParams{Owner: s.owner, Now: now, Until: now.Add(s.lease), Limit: free})
	if err != nil {
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "webhooks: claim endpoints", slog.Any("error", err))
		}
		return
	}
	for _, w := range list {
		if serving[w.ID] {
			continue
		}
		s.mu.Lock()
		busy := s.active[w.ID]
		s.active[w.ID] = true
		s.mu.Unlock()
		if busy {
			continue
		}
		workers.Go(func() {
			s.done1(w.ID, s.serve(store.WithTenant(ctx, w.Tenant), w))
		})
	}
}

// done1 ends a worker: the endpoint may be claimed again, and unless the
// worker ended on an error (which the poll retries) the loop looks for
// work at once, since events committed while the worker was finishing
// found the endpoint busy.
func (s *Service) done1(id string, again bool) {
	s.mu.Lock()
	delete(s.active, id)
	s.mu.Unlock()
	if !again {
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// serve delivers the endpoint's events after its cursor, in log order,
// until none is left, an attempt failed (its retry is scheduled), the
// endpoint was disabled or its lease was lost. Then it releases the lease.
// It reports whether it ended without an error.
func (s *Service) serve(ctx context.Context, w store.Webhook) bool {
	log := s.log.With(slog.String("webhook", w.ID), slog.String("tenant", w.Tenant))
	defer func() {
		if err := s.st.ReleaseWebhook(context.WithoutCancel(ctx), w.ID, s.owner); err != nil {
			log.WarnContext(ctx, "webhooks: release the endpoint", slog.Any("error", err))
		}
	}()
	for ctx.Err() == nil {
		evs, err := s.st.Lifecycle(ctx, store.LifecycleFilter{After: w.Cursor, Limit: batch})
		if err != nil {
			if ctx.Err() == nil {
				log.WarnContext(ctx, "webhooks: read the lifecycle log", slog.Any("error", err))
			}
			return false
		}
		if len(evs) == 0 {
			return true
		}
		cursor := w.Cursor // the events before it need no delivery
		for _, le := range evs {
			ev, ok, err := classify(le)
			if err != nil || !ok || !takes(w, ev) {
				cursor = le.ID
				continue
			}
			next, more, err := s.deliver(ctx, log, w, cursor, le, ev)
			if err != nil || !more {
				return err == nil
			}
			w, cursor = next, next.Cursor
		}
		if cursor != w.Cursor {
			if err := s.advance(ctx, store.AdvanceWebhookParams{ID: w.ID, Cursor: cursor}); err != nil {
				log.WarnContext(ctx, "webhooks: move the cursor", slog.Any("error", err))
				return false
			}
			w.Cursor = cursor
		}
	}
	return false
}

// advance records p as this deliverer, extending its lease.
func (s *Service) advance(ctx context.Context, p store.AdvanceWebhookParams) error {
	p.Owner, p.Until = s.owner, time.Now().Add(s.lease)
	return s.st.AdvanceWebhook(ctx, p)
}

// deliver makes one attempt of lifecycle event le (webhook type typ) and
// records it with the cursor: past le on success or a final failure, at
// cursor (just before le) with a scheduled retry otherwise. It returns the
// endpoint as recorded and whether to go on with the next event; an error
// (logged) says the attempt was not recorded.
func (s *Service) deliver(ctx context.Context, log *slog.Logger, w store.Webhook, cursor int64, le store.LifecycleEvent, ev event) (store.Webhook, bool, error) {
	b, err := s.body(ctx, w, le, ev)
	if err != nil {
		log.WarnContext(ctx, "webhooks: build a payload", slog.Int64("event", le.ID), slog.Any("error", err))
		return w, false, err
	}
	attempt := 1
	if w.RetryEvent == le.ID {
		attempt = w.Attempts + 1
	}
	res := s.send(ctx, w, outgoing{id: eventID(le), typ: ev.typ, body: b, trace: s.runTrace(ctx, log, ev.runID)})
	if err := ctx.Err(); err != nil {
		return w, false, err // stopping: the attempt is made again by the next claimer
	}
	d := &store.WebhookDelivery{
		ID: newID("dlv_"), WebhookID: w.ID, EventID: eventID(le), Type: ev.typ, Attempt: attempt,
		HTTPStatus: res.status, Error: res.errText(), Latency: res.latency, At: res.at, Body: b,
	}
	p := store.AdvanceWebhookParams{ID: w.ID, Cursor: le.ID, Delivery: d}
	switch {
	case res.ok():
		d.Status = store.DeliverySucceeded
	case res.status == http.StatusGone:
		// The receiver says the endpoint is gone: stop at this event, so a
		// re-enabled endpoint starts with it.
		d.Status, p.Cursor, p.Disable = store.DeliveryFailed, cursor, "gone"
	case attempt <= len(s.retry):
		d.Status, p.Cursor = store.DeliveryRetrying, cursor
		p.RetryEvent, p.Attempts, p.NextAttemptAt = le.ID, attempt, res.at.Add(s.retry[attempt-1])
	default:
		d.Status = store.DeliveryFailed
	}
	if w.Push != nil && ev.typ == TaskSettled && d.Status != store.DeliveryRetrying && p.Disable == "" {
		p.Disable = settledReason // the task's last status is told
	}
	if err := s.advance(ctx, p); err != nil {
		log.WarnContext(ctx, "webhooks: record a delivery", slog.String("event", d.EventID), slog.Any("error", err))
		return w, false, err
	}
	if p.Disable == settledReason {
		return w, false, nil
	}
	if p.Disable != "" {
		log.WarnContext(ctx, "webhooks: the receiver answered 410 Gone; endpoint disabled", slog.String("url", w.URL))
		return w, false, nil
	}
	if d.Status == store.DeliveryRetrying {
		s.mu.Lock()
		if s.due.IsZero() || p.NextAttemptAt.Before(s.due) {
			s.due = p.NextAttemptAt
		}
		s.mu.Unlock()
		return w, false, nil
	}
	w.Cursor, w.RetryEvent, w.Attempts, w.NextAttemptAt = p.Cursor, 0, 0, time.Time{}
	return w, true, nil
}

// result is the outcome of one HTTP attempt.
type result struct {
	at      time.Time
	status  int // 0 when no answer came
	err     error
	latency time.Duration
}

func (r result) ok() bool { return r.err == nil && r.status >= 200 && r.status < 300 }

// errText is the delivery log's error: the transport error, or the status.
func (r result) errText() string {
	switch {
	case r.err != nil:
		msg := r.err.Error()
		if len(msg) > maxError {
			msg = msg[:maxError]
		}
		return msg
	case !r.ok():
		return "HTTP " + strconv.Itoa(r.status)
	}
	return ""
}

// maxDrain bounds how much of an answer's body is read (and discarded) so
// that the connection can be reused.
const maxDrain = 64 << 10

// outgoing is one delivery attempt to make: event id of type typ with
// body, in the trace that traceparent trace names ("" for none).
type outgoing struct {
	id, typ string
	body    []byte
	trace   string
}

// runTrace returns the traceparent run runID's row kept, "" when the run
// kept none or is not found (a store error is logged: the delivery goes
// on in a trace of its own). A row's traceparent never changes, so the
// run's later events find it remembered.
func (s *Service) runTrace(ctx context.Context, log *slog.Logger, runID string) string {
	if runID == "" {
		return ""
	}
	if tp, ok := s.traces.get(runID); ok {
		return tp
	}
	r, err := s.st.GetRun(ctx, runID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		if ctx.Err() == nil {
			log.WarnContext(ctx, "webhooks: read the run for its trace", slog.String("run", runID), slog.Any("error", err))
		}
		return ""
	}
	s.traces.put(r.Traceparent, runID)
	return r.Traceparent
}

// send POSTs o to the endpoint, signed with the secrets that sign now,
// with a traceparent continuing o's trace (under a "webhook deliver" span
// when traces are recorded), and counts the outcome.
func (s *Service) send(ctx context.Context, w store.Webhook, o outgoing) (res result) {
	start := time.Now()
	res.at = start
	span := telemetry.StartDelivery(ctx, o.trace, o.typ)
	defer func() {
		span.End(res.status, res.err)
		s.count(ctx, res)
	}()
	tp := span.Traceparent()
	if tp == "" {
		tp = newTraceparent()
	}
	sig, err := signature(secrets(w, start), o.id, start, o.body)
	if err != nil {
		res.err = err
		return res
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(o.body))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "subagentd-webhooks")
	req.Header.Set("webhook-id", o.id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(start.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	req.Header.Set("traceparent", tp)
	if w.Push != nil && w.Push.Authorization != "" {
		req.Header.Set("Authorization", w.Push.Authorization)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		res.err, res.latency = unwrapURLError(err), time.Since(start)
		return res
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	resp.Body.Close()
	res.status, res.latency = resp.StatusCode, time.Since(start)
	return res
}

// count counts the outcome of an attempt; one abandoned because ctx ended
// (the service stopping) is no outcome.
func (s *Service) count(ctx context.Context, res result) {
	switch {
	case ctx.Err() != nil:
	case res.ok():
		s.metrics.WebhookDelivery(telemetry.WebhookSuccess)
	case res.status == http.StatusGone:
		s.metrics.WebhookDelivery(telemetry.WebhookGone)
	default:
		s.metrics.WebhookDelivery(telemetry.WebhookFailure)
	}
}

// unwrapURLError drops the "Post <url>:" prefix of a client error: the
// URL is the endpoint's, known to the reader of the log.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// marshal is json.Marshal with the error wrapped.
func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("webhooks: encode a payload: %w", err)
	}
	return b, nil
}
