package http

import (
	"net/http"

	"github.com/subagentd/subagentd/internal/subagent"
)

// listProviders answers the registered providers in registration order.
func (s *Server) listProviders(w http.ResponseWriter, r *http.Request) error {
	s.writeJSON(w, r, http.StatusOK, s.providerList())
	return nil
}

// providerList describes the registered providers in registration order.
func (s *Server) providerList() providerListJSON {
	list := providerListJSON{Providers: []providerJSON{}}
	for _, p := range s.svc.Providers() {
		list.Providers = append(list.Providers, providerOut(p, s.modelRoutes))
	}
	return list
}

// getProvider answers one provider or NO_PROVIDER.
func (s *Server) getProvider(w http.ResponseWriter, r *http.Request) error {
	p := newParams(r)
	name := p.id("name")
	if err := p.err(); err != nil {
		return err
	}
	prov, ok := s.svc.Provider(name)
	if !ok {
		return subagent.Errorf(subagent.ENoProvider, "no subagent provider named %q", name)
	}
	s.writeJSON(w, r, http.StatusOK, providerOut(prov, s.modelRoutes))
	return nil
}
