package http

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
	"github.com/subagentd/subagentd/internal/webhooks"
)

// Webhooks manages webhook endpoints and their delivery logs;
// *webhooks.Service implements it. Its errors are *subagent.Error values
// (WEBHOOK_NOT_FOUND, DELIVERY_NOT_FOUND, TOO_MANY_WEBHOOKS,
// INVALID_REQUEST).
type Webhooks interface {
	Create(ctx context.Context, p webhooks.CreateParams) (store.Webhook, error)
	List(ctx context.Context) ([]store.Webhook, error)
	Get(ctx context.Context, id string) (store.Webhook, error)
	Update(ctx context.Context, id string, u webhooks.Update) (store.Webhook, error)
	Delete(ctx context.Context, id string) error
	Rotate(ctx context.Context, id string) (store.Webhook, error)
	Test(ctx context.Context, id string) (store.WebhookDelivery, error)
	Deliveries(ctx context.Context, id, after string, limit int) (webhooks.DeliveryPage, error)
	Redeliver(ctx context.Context, id, deliveryID string) (store.WebhookDelivery, error)
}

var _ Webhooks = (*webhooks.Service)(nil)

// webhookRoutes registers the /v1/webhooks routes on r.
func (s *Server) webhookRoutes(r chi.Router) {
	r.Post("/webhooks", s.h(s.createWebhook))
	r.Get("/webhooks", s.h(s.listWebhooks))
	r.Get("/webhooks/{webhookId}", s.h(s.getWebhook))
	r.Patch("/webhooks/{webhookId}", s.h(s.updateWebhook))
	r.Delete("/webhooks/{webhookId}", s.h(s.deleteWebhook))
	r.Post("/webhooks/{webhookId}/rotate", s.h(s.rotateWebhook))
	r.Post("/webhooks/{webhookId}/test", s.h(s.testWebhook))
	r.Get("/webhooks/{webhookId}/deliveries", s.h(s.listWebhookDeliveries))
	r.Post("/webhooks/{webhookId}/deliveries/{deliveryId}/redeliver", s.h(s.redeliverWebhook))
}

// Wire forms of webhook endpoints and deliveries (api/openapi.yaml).
type (
	createWebhookRequest struct {
		URL         string   `json:"url" validate:"required,max=2048"`
		Events      []string `json:"events" validate:"required,min=1,max=16,dive,max=64"`
		Description string   `json:"description" validate:"max=512"`
	}
	updateWebhookRequest struct {
		URL         *string  `json:"url" validate:"omitnil,min=1,max=2048"`
		Events      []string `json:"events" validate:"omitnil,min=1,max=16,dive,max=64"`
		Description *string  `json:"description" validate:"omitnil,max=512"`
		Enabled     *bool    `json:"enabled"`
	}
	webhookJSON struct {
		ID             string   `json:"id"`
		URL            string   `json:"url"`
		Events         []string `json:"events"`
		Description    string   `json:"description,omitempty"`
		Enabled        bool     `json:"enabled"`
		DisabledReason string   `json:"disabledReason,omitempty"`
		CreatedAt      string   `json:"createdAt"`
		// Secret is set only in the answers to creation and rotation.
		Secret string `json:"secret,omitempty"`
	}
	webhookListJSON struct {
		Webhooks []webhookJSON `json:"webhooks"`
	}
	deliveryJSON struct {
		ID         string `json:"id"`
		EventID    string `json:"eventId"`
		Type       string `json:"type"`
		Attempt    int    `json:"attempt"`
		Status     string `json:"status"`
		HTTPStatus int    `json:"httpStatus,omitempty"`
		Error      string `json:"error,omitempty"`
		LatencyMs  int64  `json:"latencyMs"`
		At         string `json:"at"`
		// Payload is the body sent (JSON, as stored).
		Payload json.RawMessage `json:"payload"`
	}
	deliveryListJSON struct {
		Deliveries []deliveryJSON `json:"deliveries"`
		NextCursor string         `json:"nextCursor,omitempty"`
	}
)

func webhookOut(w store.Webhook, withSecret bool) webhookJSON {
	out := webhookJSON{
		ID: w.ID, URL: w.URL, Events: w.Events, Description: w.Description, Enabled: w.Enabled,
		DisabledReason: w.DisabledReason, CreatedAt: w.CreatedAt.Format(time.RFC3339Nano),
	}
	if withSecret {
		out.Secret = w.Secret
	}
	return out
}

func deliveryOut(d store.WebhookDelivery) deliveryJSON {
	return deliveryJSON{
		ID: d.ID, EventID: d.EventID, Type: d.Type, Attempt: d.Attempt, Status: d.Status, HTTPStatus: d.HTTPStatus,
		Error: d.Error, LatencyMs: d.Latency.Milliseconds(), At: d.At.Format(time.RFC3339Nano), Payload: d.Body,
	}
}

// webhooks returns the webhook service, NOT_READY without one.
func (s *Server) webhooks() (Webhooks, error) {
	if s.hooks == nil {
		return nil, subagent.Errorf(codeNotReady, "this server delivers no webhooks")
	}
	return s.hooks, nil
}

// webhookRoute reads the {webhookId} of a request and the webhook service.
func (s *Server) webhookRoute(r *http.Request) (Webhooks, string, error) {
	p := newParams(r)
	id := p.id("webhookId")
	if err := p.err(); err != nil {
		return nil, "", err
	}
	hooks, err := s.webhooks()
	return hooks, id, err
}

// createWebhook creates an endpoint and answers 201 with its secret, shown
// only this once.
func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	hooks, err := s.webhooks()
	if err != nil {
		return err
	}
	var req createWebhookRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	hook, err := hooks.Create(r.Context(), webhooks.CreateParams{URL: req.URL, Events: req.Events, Description: req.Description})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/webhooks/"+hook.ID)
	s.writeJSON(w, r, http.StatusCreated, webhookOut(hook, true))
	return nil
}

// listWebhooks answers the tenant's endpoints, oldest first.
func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	hooks, err := s.webhooks()
	if err != nil {
		return err
	}
	list, err := hooks.List(r.Context())
	if err != nil {
		return err
	}
	out := webhookListJSON{Webhooks: make([]webhookJSON, 0, len(list))}
	for _, h := range list {
		out.Webhooks = append(out.Webhooks, webhookOut(h, false))
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// getWebhook answers one endpoint, without its secret.
func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) error {
	hooks, id, err := s.webhookRoute(r)
	if err != nil {
		return err
	}
	hook, err := hooks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, webhookOut(hook, false))
	return nil
}

// updateWebhook changes an endpoint; {enabled:true} re-enables one that a
// 410 or a request disabled.
func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request) error {
	hooks, id, err := s.webhookRoute(r)
	if err != nil {
		return err
	}
	var req updateWebhookRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	hook, err := hooks.Update(r.Context(), id, webhooks.Update{URL: req.URL, Events: req.Events, Description: req.Description, Enabled: req.Enabled})
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, webhookOut(hook, false))
	return nil
}

// deleteWebhook removes an endpoint and its delivery log.
func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	hooks, id, err := s.webhookRoute(r)
	if err != nil {
		return err
	}
	if err := hooks.Delete(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// rotateWebhook gives an endpoint a new secret and answers it, shown only
// this once; the old one signs too for a day.
func (s *Server) rotateWebhook(w http.ResponseWriter, r *http.Request) error {
	hooks, id, err := s.webhookRoute(r)
	if err != nil {
		return err
	}
	hook, err := hooks.Rotate(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, webhookOut(hook, true))
	return nil
}

// testWebhook sends a webhook.test event now and answers the attempt.
func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request) error {
	hooks, id, err := s.webhookRoute(r)
	if err != nil {
		return err
	}
	d, err := hooks.Test(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, deliveryOut(d))
	return nil
}

// listWebhookDeliveries answers a page of an endpoint's delivery log,
// newest first.
func (s *Server) listWebhookDeliveries(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("webhookId")
	after := p.str("after", maxIDLength)
	limit := p.limit()
	if err := p.err(); err != nil {
		return err
	}
	hooks, err := s.webhooks()
	if err != nil {
		return err
	}
	page, err := hooks.Deliveries(r.Context(), id, after, limit)
	if err != nil {
		return err
	}
	out := deliveryListJSON{Deliveries: make([]deliveryJSON, 0, len(page.Deliveries)), NextCursor: page.Next}
	for _, d := range page.Deliveries {
		out.Deliveries = append(out.Deliveries, deliveryOut(d))
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// redeliverWebhook sends a delivery's event again now (same webhook-id and
// body) and answers the new attempt.
func (s *Server) redeliverWebhook(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id, deliveryID := p.id("webhookId"), p.id("deliveryId")
	if err := p.err(); err != nil {
		return err
	}
	hooks, err := s.webhooks()
	if err != nil {
		return err
	}
	d, err := hooks.Redeliver(r.Context(), id, deliveryID)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, deliveryOut(d))
	return nil
}
