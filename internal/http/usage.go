package http

import (
	"context"
	"net/http"

	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Usage answers the usage roll-ups of GET /v1/sessions/{id}/usage;
// *governance.Usage implements it. Its errors are *subagent.Error values
// (INVALID_REQUEST for a bad scope, SESSION_NOT_FOUND).
type Usage interface {
	Session(ctx context.Context, id, scope string) (governance.Report, error)
}

var _ Usage = (*governance.Usage)(nil)

// maxScopeLength bounds the scope parameter; the domain names the values.
const maxScopeLength = 16

// getSessionUsage answers the usage of a session or of its tree, from the
// store's sums.
func (s *Server) getSessionUsage(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	id := p.id("id")
	scope := p.str("scope", maxScopeLength)
	if err := p.err(); err != nil {
		return err
	}
	if s.usage == nil {
		return subagent.Errorf(codeNotReady, "this server keeps no usage roll-ups")
	}
	rep, err := s.usage.Session(r.Context(), id, scope)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, usageOut(rep))
	return nil
}

// usageTotalsJSON is the usage of one session or of a tree (api/openapi.yaml
// Usage).
type usageTotalsJSON struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	ModelCalls   int64 `json:"modelCalls"`
	Runs         int64 `json:"runs"`
	LiveRuns     int64 `json:"liveRuns"`
	Known        bool  `json:"known"`
}

type usageChildJSON struct {
	SessionID string `json:"sessionId"`
	usageTotalsJSON
}

type usageJSON struct {
	usageTotalsJSON
	Children []usageChildJSON `json:"children,omitempty"`
}

func totalsOut(t governance.Totals) usageTotalsJSON {
	return usageTotalsJSON{InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, ModelCalls: t.ModelCalls,
		Runs: t.Runs, LiveRuns: t.LiveRuns, Known: t.Known}
}

func usageOut(rep governance.Report) usageJSON {
	out := usageJSON{usageTotalsJSON: totalsOut(rep.Totals)}
	if rep.Children != nil {
		out.Children = make([]usageChildJSON, len(rep.Children))
		for i, c := range rep.Children {
			out.Children[i] = usageChildJSON{SessionID: c.SessionID, usageTotalsJSON: totalsOut(c.Totals)}
		}
	}
	return out
}
