package http

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/subagentd/subagentd/internal/subagent"
)

// A2A is the A2A face (internal/faces/a2a): every provider is an A2A
// agent with a public card, a JSON-RPC endpoint and an HTTP+JSON one. Its
// methods make the calls of operations.go; the router serves them behind
// the same guard as /v1 (the cards are public, like /openapi.yaml).
type A2A interface {
	// Card returns the JSON of provider's agent card ("" names the
	// default provider) as r reaches it; an unknown provider is
	// NO_PROVIDER.
	Card(r *http.Request, provider string) ([]byte, error)
	// JSONRPC serves a request of provider's JSON-RPC endpoint.
	JSONRPC(w http.ResponseWriter, r *http.Request, provider string)
	// REST serves a request below provider's HTTP+JSON endpoint, its path
	// still the full one.
	REST(w http.ResponseWriter, r *http.Request, provider string)
}

// Paths of the A2A face.
const (
	a2aPrefix   = "/a2a"
	a2aCardPath = "/.well-known/agent-card.json"
)

// a2aRoutes adds the A2A face's routes: the host root's card, and per
// provider its card, its JSON-RPC endpoint and the HTTP+JSON binding's
// routes (those a2asrv.NewRESTHandler serves; POST /tasks/{task} is
// {id}:cancel and {id}:subscribe).
func (s *Server) a2aRoutes(r chi.Router) {
	r.Get(a2aCardPath, s.h(s.a2aCard))
	r.Route(a2aPrefix+"/{provider}", func(r chi.Router) {
		r.Get(a2aCardPath, s.h(s.a2aCard))
		r.Post("/", s.h(s.a2aJSONRPC))
		r.Route("/rest", func(r chi.Router) {
			r.Post("/message:send", s.h(s.a2aREST))
			r.Post("/message:stream", s.h(s.a2aREST))
			r.Get("/tasks", s.h(s.a2aREST))
			r.Get("/tasks/{task}", s.h(s.a2aREST))
			r.Post("/tasks/{task}", s.h(s.a2aREST))
			r.Get("/tasks/{task}/pushNotificationConfigs", s.h(s.a2aREST))
			r.Post("/tasks/{task}/pushNotificationConfigs", s.h(s.a2aREST))
			r.Get("/tasks/{task}/pushNotificationConfigs/{config}", s.h(s.a2aREST))
			r.Delete("/tasks/{task}/pushNotificationConfigs/{config}", s.h(s.a2aREST))
			r.Get("/extendedAgentCard", s.h(s.a2aREST))
		})
	})
}

// a2aPublic reports whether path is an A2A agent card, which needs no
// token: /.well-known/agent-card.json or /a2a/{provider}/.well-known/agent-card.json.
func a2aPublic(path string) bool {
	rest, ok := strings.CutPrefix(path, a2aPrefix+"/")
	if !ok {
		return path == a2aCardPath
	}
	provider, card, ok := strings.Cut(rest, "/")
	return ok && provider != "" && "/"+card == a2aCardPath
}

// a2aFace returns the face, or NOT_READY when this server runs none.
func (s *Server) a2aFace() (A2A, error) {
	if s.a2a == nil {
		return nil, subagent.Errorf(codeNotReady, "this server runs no A2A face")
	}
	return s.a2a, nil
}

// a2aCard answers a provider's agent card (the host root's: the default
// provider's).
func (s *Server) a2aCard(w http.ResponseWriter, r *http.Request) error {
	face, err := s.a2aFace()
	if err != nil {
		return err
	}
	provider := ""
	if r.URL.Path != a2aCardPath {
		p := newParams(r)
		provider = p.id("provider")
		if err := p.err(); err != nil {
			return err
		}
	}
	card, err := face.Card(r, provider)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, err = w.Write(card)
	return err
}

// a2aProvider checks the {provider} of an A2A request, bounds its body as
// a /v1 body is and checks its text (checkedBody).
func (s *Server) a2aProvider(w http.ResponseWriter, r *http.Request) (A2A, string, error) {
	face, err := s.a2aFace()
	if err != nil {
		return nil, "", err
	}
	p := newParams(r)
	name := p.id("provider")
	if err := p.err(); err != nil {
		return nil, "", err
	}
	if _, ok := s.svc.Provider(name); !ok {
		return nil, "", subagent.Errorf(subagent.ENoProvider, "no subagent provider named %q", name)
	}
	r.Body = &checkedBody{w: w, body: http.MaxBytesReader(w, r.Body, s.bodyLimit)}
	return face, name, nil
}

// a2aJSONRPC hands a request of a provider's JSON-RPC endpoint to the
// face.
func (s *Server) a2aJSONRPC(w http.ResponseWriter, r *http.Request) error {
	face, provider, err := s.a2aProvider(w, r)
	if err != nil {
		return err
	}
	face.JSONRPC(w, r, provider)
	return nil
}

// a2aREST hands a request of a provider's HTTP+JSON endpoint to the face.
func (s *Server) a2aREST(w http.ResponseWriter, r *http.Request) error {
	face, provider, err := s.a2aProvider(w, r)
	if err != nil {
		return err
	}
	face.REST(w, r, provider)
	return nil
}
