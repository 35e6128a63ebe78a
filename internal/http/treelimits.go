package http

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// TreeLimits answers a tree's limits (GET /v1/sessions/{id}'s limits,
// PATCH /v1/sessions/{id}/limits); *governance.Limits implements it.
type TreeLimits interface {
	// InForce returns the limits in force at session sess.
	InForce(ctx context.Context, sess store.Session) (store.Limits, error)
	// Patch changes a root's limits and returns its tree's state.
	Patch(ctx context.Context, id string, p governance.LimitsPatch) (governance.Tree, error)
}

var _ TreeLimits = (*governance.Limits)(nil)

// limitsJSON is the limits object of a request (api/openapi.yaml
// Limits): on a root's creation, a child's start, or a PATCH.
type limitsJSON struct {
	MaxDepth      *int64 `json:"maxDepth" validate:"omitempty,min=0,max=9007199254740991"`
	MaxChildren   *int64 `json:"maxChildren" validate:"omitempty,min=0,max=9007199254740991"`
	MaxConcurrent *int64 `json:"maxConcurrent" validate:"omitempty,min=0,max=9007199254740991"`
	TokenBudget   *int64 `json:"tokenBudget" validate:"omitempty,min=0,max=9007199254740991"`
	Deadline      string `json:"deadline" validate:"max=64"`
	IdleTimeout   string `json:"idleTimeout" validate:"max=64"`
}

// seam returns the limits as the domain takes them; nil stays nil.
func (l *limitsJSON) seam() *subagent.Limits {
	if l == nil {
		return nil
	}
	return &subagent.Limits{MaxDepth: l.MaxDepth, MaxChildren: l.MaxChildren, MaxConcurrent: l.MaxConcurrent,
		TokenBudget: l.TokenBudget, Deadline: l.Deadline, IdleTimeout: l.IdleTimeout}
}

// limitsOutJSON is a stored or in-force limits object as responses show
// it: the deadline as an RFC 3339 time, idleTimeout as a Go duration.
type limitsOutJSON struct {
	MaxDepth      *int64     `json:"maxDepth,omitempty"`
	MaxChildren   *int64     `json:"maxChildren,omitempty"`
	MaxConcurrent *int64     `json:"maxConcurrent,omitempty"`
	TokenBudget   *int64     `json:"tokenBudget,omitempty"`
	Deadline      *time.Time `json:"deadline,omitempty"`
	IdleTimeout   string     `json:"idleTimeout,omitempty"`
}

func limitsOut(l store.Limits) *limitsOutJSON {
	out := &limitsOutJSON{MaxDepth: l.MaxDepth, MaxChildren: l.MaxChildren, MaxConcurrent: l.MaxConcurrent,
		TokenBudget: l.TokenBudget, Deadline: l.Deadline}
	if l.IdleTimeout != nil {
		out.IdleTimeout = l.IdleTimeout.String()
	}
	return out
}

// treeLimitsJSON answers PATCH /v1/sessions/{id}/limits.
type treeLimitsJSON struct {
	Limits *limitsOutJSON `json:"limits"`
	Usage  treeUsageJSON  `json:"usage"`
	Paused bool           `json:"paused"`
}

type treeUsageJSON struct {
	Tokens   int64 `json:"tokens"`
	LiveRuns int64 `json:"liveRuns"`
}

// patchSessionLimits changes a root's limits: the fields the body sets,
// and those it sets to null cleared.
func (s *Server) patchSessionLimits(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	if err := p.err(); err != nil {
		return err
	}
	data, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req limitsJSON
	if err := s.unmarshal(data, &req); err != nil {
		return err
	}
	patch := governance.LimitsPatch{Set: *req.seam(), Clear: nulls(data)}
	if s.limits == nil {
		return subagent.Errorf(codeNotReady, "this server keeps no tree limits")
	}
	t, err := s.limits.Patch(r.Context(), id, patch)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, treeLimitsJSON{Limits: limitsOut(t.Limits),
		Usage: treeUsageJSON{Tokens: t.Tokens, LiveRuns: t.LiveRuns}, Paused: t.Exhausted()})
	return nil
}

// nulls are the limit fields a PATCH body, already unmarshalled into
// limitsJSON, sets to null: those it clears.
func nulls(body []byte) []string {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // unmarshal accepted it as an object
	var out []string
	for _, name := range store.LimitNames {
		if v, ok := fields[name]; ok && string(v) == "null" {
			out = append(out, name)
		}
	}
	return out
}
