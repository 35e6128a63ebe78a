package model

import (
	"errors"
	"fmt"
	"slices"
)

// ErrUnknownRoute is returned by Routes.Resolve for a route name that is not
// configured.
var ErrUnknownRoute = errors.New("unknown model route")

// Route kinds (Route.Kind). KindEcho is the offline deterministic model;
// dashboards and /v1/providers label it as such.
const (
	KindEcho   = "echo"
	KindOpenAI = "openai"
)

// Route is one named way to reach a model: the echo model, a scripted model in
// tests, or an OpenAI-compatible server. DefaultModel is the model name used
// when agentOptions.model is empty.
type Route struct {
	Name         string
	Kind         string
	DefaultModel string
	Model        Model
}

// Routes maps agentOptions.provider (a route name) onto a Model. The zero
// value is unusable; build it with NewRoutes. Routes is read-only after
// construction and safe for concurrent use.
type Routes struct {
	byName map[string]Route
	order  []string
	def    string
}

// NewRoutes returns a table holding routes in order; def names the default
// route and must be one of them.
func NewRoutes(def string, routes ...Route) (*Routes, error) {
	r := &Routes{byName: map[string]Route{}, def: def}
	for _, rt := range routes {
		if rt.Name == "" || rt.Model == nil {
			return nil, fmt.Errorf("model route %q: name and model are required", rt.Name)
		}
		if _, dup := r.byName[rt.Name]; dup {
			return nil, fmt.Errorf("model route %q is configured twice", rt.Name)
		}
		r.byName[rt.Name] = rt
		r.order = append(r.order, rt.Name)
	}
	if _, ok := r.byName[def]; !ok {
		return nil, fmt.Errorf("default model route %q is not configured", def)
	}
	return r, nil
}

// Default returns the default route.
func (r *Routes) Default() Route { return r.byName[r.def] }

// Names lists the route names in configuration order.
func (r *Routes) Names() []string { return slices.Clone(r.order) }

// Resolve returns the route named name (the default when empty) and the model
// name to request (modelName, else the route's default). It returns an error
// wrapping ErrUnknownRoute when name is not configured.
func (r *Routes) Resolve(name, modelName string) (Route, string, error) {
	if name == "" {
		name = r.def
	}
	rt, ok := r.byName[name]
	if !ok {
		return Route{}, "", fmt.Errorf("%w %q (configured: %v)", ErrUnknownRoute, name, r.order)
	}
	if modelName == "" {
		modelName = rt.DefaultModel
	}
	return rt, modelName, nil
}
