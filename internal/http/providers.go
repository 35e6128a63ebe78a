package http

import (
	"context"
	"fmt"
	"net/http"

	"github.com/subagentd/subagentd/internal/subagent"
)

// awaitProbe waits, within ctx, until p's capabilities are known or
// cannot be, so that an unknown capability is never reported as false. It
// returns why p's agent cannot be started ("" when it can, or p learns
// nothing at run time), or NOT_READY (wrapping ctx's error) when ctx ended
// first.
func awaitProbe(ctx context.Context, p subagent.Provider) (unavailable string, err error) {
	pr, ok := p.(subagent.Prober)
	if !ok {
		return "", nil
	}
	err = pr.WaitProbe(ctx)
	switch {
	case ctx.Err() != nil:
		return "", &subagent.Error{Code: codeNotReady, Err: ctx.Err(),
			Message: fmt.Sprintf("provider %q is still starting its agent to learn its capabilities", p.Name())}
	case err != nil:
		return subagent.ErrorMessage(err), nil
	}
	return "", nil
}

// listProviders answers the registered providers in registration order,
// once their capabilities are known (awaitProbe).
func (s *Server) listProviders(w http.ResponseWriter, r *http.Request) error {
	list, err := s.providerList(r.Context())
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, list)
	return nil
}

// providerList describes the registered providers in registration order,
// once their capabilities are known (awaitProbe).
func (s *Server) providerList(ctx context.Context) (providerListJSON, error) {
	list := providerListJSON{Providers: []providerJSON{}}
	for _, p := range s.svc.Providers() {
		if _, err := awaitProbe(ctx, p); err != nil {
			return providerListJSON{}, err
		}
		list.Providers = append(list.Providers, providerOut(p, s.modelRoutes))
	}
	return list, nil
}

// getProvider answers one provider, once its capabilities are known
// (awaitProbe), or NO_PROVIDER.
func (s *Server) getProvider(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	name := p.id("name")
	if err := p.err(); err != nil {
		return err
	}
	out, err := s.provider(r.Context(), name)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// provider describes provider name once its capabilities are known
// (awaitProbe); NO_PROVIDER when there is none.
func (s *Server) provider(ctx context.Context, name string) (providerJSON, error) {
	prov, ok := s.svc.Provider(name)
	if !ok {
		return providerJSON{}, subagent.Errorf(subagent.ENoProvider, "no subagent provider named %q", name)
	}
	if _, err := awaitProbe(ctx, prov); err != nil {
		return providerJSON{}, err
	}
	return providerOut(prov, s.modelRoutes), nil
}
