package store

import (
	"context"
	"time"
)

// Webhook is a webhook endpoint (internal/webhooks) with its delivery
// state. Its outbox is the lifecycle log itself: Cursor is the id of the
// last lifecycle event the endpoint is done with, so nothing is written
// per event that could disagree with the log.
type Webhook struct {
	ID string
	// Tenant is filled in when reading; the context's tenant is used on
	// write.
	Tenant      string
	URL         string
	Events      []string
	Description string
	Enabled     bool
	// DisabledReason says why a disabled endpoint was disabled ("gone":
	// the receiver answered 410; "manual": by request).
	DisabledReason string
	// Secret signs every delivery; PrevSecret, until PrevSecretUntil,
	// signs them too (a rotation's overlap).
	Secret          string
	PrevSecret      string
	PrevSecretUntil time.Time
	CreatedAt       time.Time

	// Cursor is the id of the last lifecycle event handled (delivered,
	// failed for good or not subscribed). CreateWebhook sets it to the
	// newest committed id: an endpoint gets only later events.
	Cursor int64
	// RetryEvent is the lifecycle event after Cursor whose delivery failed
	// Attempts times so far; its next attempt is due at NextAttemptAt.
	RetryEvent    int64
	Attempts      int
	NextAttemptAt time.Time
	// Owner and LeaseUntil name the deliverer that holds the endpoint:
	// one at a time, so deliveries of one endpoint never overlap.
	Owner      string
	LeaseUntil time.Time

	// Push, when set, scopes the endpoint to one task: it is an A2A
	// push-notification config (internal/faces/a2a). ListWebhooks leaves
	// such endpoints out; TaskWebhooks lists them.
	Push *WebhookPush
}

// WebhookPush is what scopes an endpoint to one task.
type WebhookPush struct {
	TaskID string
	// ConfigID is the config's id, unique among the task's configs.
	ConfigID string
	// Authorization is the Authorization header each delivery carries, ""
	// for none; Token the A2A-Notification-Token header, "" for none.
	Authorization string
	Token         string
}

// WebhookUpdate changes the fields that are set.
type WebhookUpdate struct {
	URL         *string
	Events      []string // nil keeps them
	Description *string
	// Enabled re-enables (true, also clearing DisabledReason and the retry
	// state) or disables (false, reason "manual") the endpoint.
	Enabled *bool
	// Secret and PrevSecretUntil rotate the secret: the old one becomes
	// PrevSecret until PrevSecretUntil.
	Secret          string
	PrevSecretUntil time.Time
}

// Delivery statuses.
const (
	DeliverySucceeded = "succeeded"
	// DeliveryRetrying: the attempt failed and another one is scheduled.
	DeliveryRetrying = "retrying"
	// DeliveryFailed: the attempt failed and no other follows.
	DeliveryFailed = "failed"
)

// WebhookDelivery is one attempt to deliver an event to an endpoint.
type WebhookDelivery struct {
	ID        string
	WebhookID string
	// EventID is the webhook-id header: the same on every attempt.
	EventID    string
	Type       string
	Attempt    int
	Status     string
	HTTPStatus int    // 0 when no answer came
	Error      string // "" on success
	Latency    time.Duration
	At         time.Time
	// Body is the payload sent, kept so that a redelivery sends the same.
	Body []byte
}

// WebhookDeliveryFilter pages an endpoint's deliveries, newest first.
type WebhookDeliveryFilter struct {
	WebhookID string
	// BeforeID continues a listing after (older than) this delivery.
	BeforeID string
	Limit    int
}

// ClaimWebhooksParams selects the endpoints a deliverer takes over.
type ClaimWebhooksParams struct {
	Owner string
	// Now decides which leases lapsed and which retries are due; Until is
	// the new lease.
	Now, Until time.Time
	Limit      int
}

// AdvanceWebhookParams records what a deliverer did with the endpoint's
// next event(s).
type AdvanceWebhookParams struct {
	ID    string
	Owner string
	// Cursor is the new Cursor (never moved backwards).
	Cursor int64
	// RetryEvent, Attempts and NextAttemptAt are the new retry state;
	// zero when no event is being retried.
	RetryEvent    int64
	Attempts      int
	NextAttemptAt time.Time
	// Disable disables the endpoint with this reason when set.
	Disable string
	// Until extends the lease.
	Until time.Time
	// Delivery, when set, is the attempt to add to the delivery log.
	Delivery *WebhookDelivery
}

// WebhookBacklog is what the enabled endpoints of every tenant have yet
// to go through: the lifecycle events after their cursors.
type WebhookBacklog struct {
	// Events sums, over the endpoints, their tenant's lifecycle events
	// after their cursor, each endpoint's count capped at the cap asked
	// for (so the sum is "at least" past it).
	Events int64
	// Oldest is the commit time of the oldest of those events; zero when
	// there are none.
	Oldest time.Time
}

// Webhooks is the part of Store that keeps webhook endpoints, their
// cursors into the lifecycle log and their delivery logs.
type Webhooks interface {
	// CreateWebhook stores w with Cursor at the newest committed lifecycle
	// id (of any tenant; ids are global) and returns it as stored.
	// Returns ErrConflict if the id exists, or if w.Push names a task and
	// config id the tenant has an endpoint for already.
	CreateWebhook(ctx context.Context, w Webhook) (Webhook, error)
	// GetWebhook returns one endpoint. Returns ErrNotFound.
	GetWebhook(ctx context.Context, id string) (Webhook, error)
	// ListWebhooks returns the tenant's endpoints that are not scoped to a
	// task (Push nil) by (CreatedAt, ID), at most 1000.
	ListWebhooks(ctx context.Context) ([]Webhook, error)
	// TaskWebhooks returns the tenant's endpoints scoped to task taskID by
	// (CreatedAt, ID), at most 1000.
	TaskWebhooks(ctx context.Context, taskID string) ([]Webhook, error)
	// UpdateWebhook applies u and returns the endpoint. Returns
	// ErrNotFound.
	UpdateWebhook(ctx context.Context, id string, u WebhookUpdate) (Webhook, error)
	// DeleteWebhook removes the endpoint and its delivery log. Returns
	// ErrNotFound.
	DeleteWebhook(ctx context.Context, id string) error

	// ClaimWebhooks leases to p.Owner, across tenants, up to p.Limit
	// enabled endpoints that have lifecycle events after their Cursor,
	// whose retry (if any) is due at p.Now and whose lease is free, lapsed
	// before p.Now or held by p.Owner already; it returns them.
	ClaimWebhooks(ctx context.Context, p ClaimWebhooksParams) ([]Webhook, error)
	// AdvanceWebhook records p if p.Owner still holds the endpoint's
	// lease, and adds p.Delivery to the delivery log in the same
	// transaction. Returns ErrFenced if another owner holds it (or it
	// lapsed and nobody does), ErrNotFound if the endpoint is gone.
	AdvanceWebhook(ctx context.Context, p AdvanceWebhookParams) error
	// ReleaseWebhook drops owner's lease on the endpoint; another
	// owner's lease, or an unknown id, is left alone.
	ReleaseWebhook(ctx context.Context, id, owner string) error

	// WebhookBacklog returns the backlog of the enabled endpoints of every
	// tenant, counting at most upTo events per endpoint.
	WebhookBacklog(ctx context.Context, upTo int) (WebhookBacklog, error)
	// WebhooksEnabled reports whether any tenant has an enabled endpoint:
	// while none has, a new lifecycle event is nobody's delivery.
	WebhooksEnabled(ctx context.Context) (bool, error)

	// AddWebhookDelivery adds d (an on-demand attempt: a test, a
	// redelivery) to the delivery log. Returns ErrNotFound if the endpoint
	// is gone.
	AddWebhookDelivery(ctx context.Context, d WebhookDelivery) error
	// WebhookDeliveries returns up to f.Limit deliveries of the endpoint,
	// newest first. Returns ErrNotFound for an unknown endpoint or
	// BeforeID.
	WebhookDeliveries(ctx context.Context, f WebhookDeliveryFilter) ([]WebhookDelivery, error)
	// GetWebhookDelivery returns one delivery of the endpoint. Returns
	// ErrNotFound.
	GetWebhookDelivery(ctx context.Context, webhookID, id string) (WebhookDelivery, error)
	// SweepWebhookDeliveries deletes the deliveries of every tenant made
	// before before and returns how many it deleted.
	SweepWebhookDeliveries(ctx context.Context, before time.Time) (int64, error)
}

// WebhooksTopic is the wake-up topic of the endpoints: a new, changed or
// re-enabled endpoint may have events to deliver.
const WebhooksTopic = "webhooks"
