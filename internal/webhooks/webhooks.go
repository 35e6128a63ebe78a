// Package webhooks delivers lifecycle events to HTTP endpoints as signed
// Standard Webhooks (standardwebhooks.com): endpoint management, the
// durable outbox, signing and the SSRF-guarded client. No HTTP handlers,
// no SQL.
//
// The outbox is the committed lifecycle log itself. Each endpoint keeps a
// cursor into it (store.Webhook.Cursor), moved past an event only after the
// event was delivered, failed for good, or is not one the endpoint
// subscribed to; nothing is written per event that could disagree with the
// log. A deliverer claims an endpoint with a lease (store.ClaimWebhooks),
// so whichever replica claims it delivers, never two at once, in log order;
// a crash between an attempt and its record means the attempt is made
// again (at least once). A failing event is retried on the Retry schedule,
// then recorded failed and passed; a 410 disables the endpoint.
package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/telemetry"
)

// Error codes of this package (the HTTP layer maps them to statuses).
const (
	ENotFound         = "WEBHOOK_NOT_FOUND"
	EDeliveryNotFound = "DELIVERY_NOT_FOUND"
	// ETooMany: the tenant has MaxPerTenant endpoints already.
	ETooMany = "TOO_MANY_WEBHOOKS"
)

// Defaults and bounds.
const (
	// DefaultTimeout bounds one delivery attempt.
	DefaultTimeout = 15 * time.Second
	// DefaultPoll is how often a deliverer looks for due work without a
	// wake-up: the safety net for a lost one, and how a replica notices a
	// retry another replica scheduled and then died.
	DefaultPoll = 2 * time.Second
	// MaxPerTenant bounds a tenant's endpoints.
	MaxPerTenant = 100
	// MaxURL and MaxDescription bound an endpoint's strings.
	MaxURL         = 2048
	MaxDescription = 512
	// RotationOverlap is how long the replaced secret still signs.
	RotationOverlap = 24 * time.Hour
	// DeliveryRetention is how long the delivery log keeps an attempt.
	DeliveryRetention = 30 * 24 * time.Hour
	// maxWorkers bounds the endpoints one deliverer serves at once.
	maxWorkers = 16
	// batch is how many lifecycle events a worker reads at a time.
	batch = 100
	// maxError bounds the error text of a delivery.
	maxError = 512
	// backlogCap bounds how many events of one endpoint the backlog
	// metric counts, and so the cost of counting them.
	backlogCap = 100_000
)

// DefaultRetry is the retry schedule: the waits after the first, second, …
// failed attempt of an event; after the last the event is failed.
var DefaultRetry = []time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// ParseRetry reads a retry schedule: comma-separated positive Go durations
// (SUBAGENTD_WEBHOOK_RETRY), at most 20.
func ParseRetry(s string) ([]time.Duration, error) {
	parts := strings.Split(s, ",")
	if len(parts) > 20 {
		return nil, fmt.Errorf("at most 20 retries, got %d", len(parts))
	}
	out := make([]time.Duration, len(parts))
	for i, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a positive Go duration", p)
		}
		out[i] = d
	}
	return out, nil
}

// Store is what the service needs of a store.Store.
type Store interface {
	store.Webhooks
	// Lifecycle reads the log the deliveries come from.
	Lifecycle(ctx context.Context, f store.LifecycleFilter) ([]store.LifecycleEvent, error)
	// GetSession finds the root of a tree for the payloads.
	GetSession(ctx context.Context, id string) (store.Session, error)
	// GetRun finds the trace a delivery continues.
	GetRun(ctx context.Context, runID string) (store.Run, error)
	// TaskWebhooks lists a task's push configs.
	TaskWebhooks(ctx context.Context, taskID string) ([]store.Webhook, error)
	// Subscribe wakes the deliverer on new events and endpoints.
	Subscribe(topic string) (<-chan struct{}, func())
}

// Config configures a Service. Store, Logger and Owner are required.
type Config struct {
	Store  Store
	Logger *slog.Logger
	// Owner names this deliverer in endpoint leases (the replica id).
	Owner string
	// Retry is the retry schedule; nil means DefaultRetry.
	Retry []time.Duration
	// Timeout bounds one attempt; 0 means DefaultTimeout.
	Timeout time.Duration
	// Poll is the interval of the safety-net poll; 0 means DefaultPoll.
	Poll time.Duration
	// AllowPrivate lets deliveries reach loopback, private and link-local
	// addresses (SUBAGENTD_WEBHOOK_ALLOW_PRIVATE).
	AllowPrivate bool
	// Metrics counts attempts by outcome and, when set, gets the backlog
	// read from the store once per poll interval; nil counts nothing.
	Metrics *telemetry.Metrics
	// PushBody builds the bodies of push endpoints' deliveries (see
	// push.go); nil refuses push configs.
	PushBody PushBody
}

// Service manages endpoints and, between Start and Stop, delivers to them.
type Service struct {
	st      Store
	log     *slog.Logger
	owner   string
	retry   []time.Duration
	timeout time.Duration
	// lease is how long a claim holds an endpoint: an attempt (at most
	// timeout) and its record fit in it with room to spare, so a lease
	// never lapses under a live attempt.
	lease   time.Duration
	poll    time.Duration
	client  *http.Client
	roots   roots
	traces  memo[string] // run id → the traceparent its row kept
	metrics *telemetry.Metrics
	// pushBody builds push endpoints' bodies.
	pushBody PushBody

	// kick wakes the loop when a worker ends or schedules a retry.
	kick chan struct{}
	// mu guards active and due.
	mu     sync.Mutex
	active map[string]bool // endpoints a worker of this process serves
	due    time.Time       // the earliest retry this process scheduled

	stop context.CancelFunc
	done chan struct{}
}

// New returns a Service for cfg.
func New(cfg Config) *Service {
	retry := cfg.Retry
	if retry == nil {
		retry = DefaultRetry
	}
	timeout := cmpOr(cfg.Timeout, DefaultTimeout)
	return &Service{
		st: cfg.Store, log: cfg.Logger, owner: cfg.Owner, retry: retry,
		timeout: timeout, lease: 2*timeout + 5*time.Second, poll: cmpOr(cfg.Poll, DefaultPoll),
		client: newClient(timeout, cfg.AllowPrivate),
		roots:  roots{st: cfg.Store}, metrics: cfg.Metrics, pushBody: cfg.PushBody,
		kick:   make(chan struct{}, 1),
		active: make(map[string]bool),
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// CreateParams is a new endpoint.
type CreateParams struct {
	URL         string
	Events      []string
	Description string
}

// Update changes the fields that are set.
type Update struct {
	URL         *string
	Events      []string
	Description *string
	Enabled     *bool
}

// notFound maps store.ErrNotFound to code, passing other errors on.
func notFound(err error, code, format string, args ...any) error {
	if errors.Is(err, store.ErrNotFound) {
		return &subagent.Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
	}
	return err
}

// checkURL and checkEvents report bad input as INVALID_REQUEST with the
// field named.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(raw) > MaxURL {
		return &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid request: url: must be an absolute http or https URL",
			Fields: map[string]string{"url": fmt.Sprintf("must be an absolute http or https URL of at most %d characters", MaxURL)}}
	}
	return nil
}

func checkEvents(events []string) error {
	for _, e := range events {
		if !slices.Contains(EventTypes, e) {
			return &subagent.Error{Code: subagent.EInvalidRequest, Message: fmt.Sprintf("invalid request: events: unknown event type %q", e),
				Fields: map[string]string{"events": "must hold only: " + strings.Join(EventTypes, ", ")}}
		}
	}
	if len(events) == 0 {
		return &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid request: events: must name at least one event type",
			Fields: map[string]string{"events": "must have at least 1 items"}}
	}
	return nil
}

// Create stores a new enabled endpoint with a new secret (returned in
// Secret, shown to the caller only now). It receives only events committed
// after it. Returns INVALID_REQUEST or TOO_MANY_WEBHOOKS.
func (s *Service) Create(ctx context.Context, p CreateParams) (store.Webhook, error) {
	if err := errors.Join(checkURL(p.URL), checkEvents(p.Events)); err != nil {
		return store.Webhook{}, err
	}
	list, err := s.st.ListWebhooks(ctx)
	if err != nil {
		return store.Webhook{}, err
	}
	if len(list) >= MaxPerTenant {
		return store.Webhook{}, subagent.Errorf(ETooMany, "a tenant may have at most %d webhook endpoints", MaxPerTenant)
	}
	return s.st.CreateWebhook(ctx, store.Webhook{
		ID: newID("wh_"), URL: p.URL, Events: slices.Compact(slices.Sorted(slices.Values(p.Events))),
		Description: p.Description, Enabled: true, Secret: newSecret(), CreatedAt: time.Now(),
	})
}

// List returns the tenant's endpoints, oldest first.
func (s *Service) List(ctx context.Context) ([]store.Webhook, error) { return s.st.ListWebhooks(ctx) }

// Get returns one endpoint. Returns WEBHOOK_NOT_FOUND.
func (s *Service) Get(ctx context.Context, id string) (store.Webhook, error) {
	w, err := s.st.GetWebhook(ctx, id)
	return w, notFound(err, ENotFound, "no webhook %q", id)
}

// Update changes an endpoint; Enabled true re-enables one that a 410 or a
// request disabled, and delivery resumes at the event it stopped at.
// Returns WEBHOOK_NOT_FOUND or INVALID_REQUEST.
func (s *Service) Update(ctx context.Context, id string, u Update) (store.Webhook, error) {
	if u.URL != nil {
		if err := checkURL(*u.URL); err != nil {
			return store.Webhook{}, err
		}
	}
	if u.Events != nil {
		if err := checkEvents(u.Events); err != nil {
			return store.Webhook{}, err
		}
		u.Events = slices.Compact(slices.Sorted(slices.Values(u.Events)))
	}
	w, err := s.st.UpdateWebhook(ctx, id, store.WebhookUpdate{URL: u.URL, Events: u.Events, Description: u.Description, Enabled: u.Enabled})
	return w, notFound(err, ENotFound, "no webhook %q", id)
}

// Delete removes an endpoint and its delivery log. Returns
// WEBHOOK_NOT_FOUND.
func (s *Service) Delete(ctx context.Context, id string) error {
	return notFound(s.st.DeleteWebhook(ctx, id), ENotFound, "no webhook %q", id)
}

// Rotate gives the endpoint a new secret (returned in Secret); the old one
// signs too for RotationOverlap. Returns WEBHOOK_NOT_FOUND.
func (s *Service) Rotate(ctx context.Context, id string) (store.Webhook, error) {
	w, err := s.st.UpdateWebhook(ctx, id, store.WebhookUpdate{Secret: newSecret(), PrevSecretUntil: time.Now().Add(RotationOverlap)})
	return w, notFound(err, ENotFound, "no webhook %q", id)
}

// Test sends a webhook.test event to the endpoint now, whatever it
// subscribed to and whether or not it is enabled, and returns the attempt
// as recorded in its delivery log. It is not retried. Returns
// WEBHOOK_NOT_FOUND.
func (s *Service) Test(ctx context.Context, id string) (store.WebhookDelivery, error) {
	w, err := s.Get(ctx, id)
	if err != nil {
		return store.WebhookDelivery{}, err
	}
	now := time.Now()
	b, err := marshal(body{Type: Test, Timestamp: timestamp(now), Data: bodyData{WebhookID: w.ID}})
	if err != nil {
		return store.WebhookDelivery{}, err
	}
	return s.onDemand(ctx, w, store.WebhookDelivery{EventID: newID("evt_test_"), Type: Test, Attempt: 1, Body: b})
}

// Redeliver sends the event of one of the endpoint's deliveries again now
// (same webhook-id, same body) and returns the new attempt. It is not
// retried. Returns WEBHOOK_NOT_FOUND or DELIVERY_NOT_FOUND.
func (s *Service) Redeliver(ctx context.Context, id, deliveryID string) (store.WebhookDelivery, error) {
	w, err := s.Get(ctx, id)
	if err != nil {
		return store.WebhookDelivery{}, err
	}
	d, err := s.st.GetWebhookDelivery(ctx, id, deliveryID)
	if err != nil {
		return store.WebhookDelivery{}, notFound(err, EDeliveryNotFound, "webhook %q has no delivery %q", id, deliveryID)
	}
	return s.onDemand(ctx, w, store.WebhookDelivery{EventID: d.EventID, Type: d.Type, Attempt: d.Attempt + 1, Body: d.Body})
}

// onDemand makes one attempt of d and adds it to the delivery log.
func (s *Service) onDemand(ctx context.Context, w store.Webhook, d store.WebhookDelivery) (store.WebhookDelivery, error) {
	res := s.send(ctx, w, outgoing{id: d.EventID, typ: d.Type, body: d.Body})
	d.ID, d.WebhookID, d.At = newID("dlv_"), w.ID, res.at
	d.HTTPStatus, d.Error, d.Latency = res.status, res.errText(), res.latency
	d.Status = store.DeliveryFailed
	if res.ok() {
		d.Status = store.DeliverySucceeded
	}
	if err := s.st.AddWebhookDelivery(ctx, d); err != nil {
		return store.WebhookDelivery{}, notFound(err, ENotFound, "no webhook %q", w.ID)
	}
	return d, nil
}

// DeliveryPage is a page of a delivery log, newest first; Next continues
// it ("" at the end).
type DeliveryPage struct {
	Deliveries []store.WebhookDelivery
	Next       string
}

// Deliveries pages the endpoint's delivery log, newest first, continuing
// after (older than) the delivery id after. Returns WEBHOOK_NOT_FOUND, or
// INVALID_REQUEST for an unknown cursor.
func (s *Service) Deliveries(ctx context.Context, id, after string, limit int) (DeliveryPage, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return DeliveryPage{}, err
	}
	list, err := s.st.WebhookDeliveries(ctx, store.WebhookDeliveryFilter{WebhookID: id, BeforeID: after, Limit: limit + 1})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return DeliveryPage{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid request: after: names no delivery of this webhook",
				Fields: map[string]string{"after": "names no delivery of this webhook"}, Err: err}
		}
		return DeliveryPage{}, err
	}
	page := DeliveryPage{Deliveries: list}
	if len(list) > limit {
		page.Deliveries = list[:limit]
		page.Next = list[limit-1].ID
	}
	return page, nil
}
