package main

import (
	"fmt"
	"log/slog"

	cfgfile "github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/model/openai"
)

// Environment variables of the OpenAI-compatible environment route
// (docs/architecture.md §9).
const (
	envBaseURL = "OPENAI_BASE_URL"
	envAPIKey  = "OPENAI_API_KEY"
	envModel   = "SUBAGENTD_MODEL"
)

// envRoute is the name of the route the OPENAI_* variables configure.
const envRoute = "openai"

// defaultOpenAIModel is requested by the environment route when only
// OPENAI_API_KEY is set: the key alone means api.openai.com, where this
// small model exists. Any other server needs SUBAGENTD_MODEL.
const defaultOpenAIModel = "gpt-4o-mini"

// routesFromConfig builds the model route table of in-process agents
// (docs/architecture.md §9): picking model adapters is wiring, so it lives in main; it
// needs both config and the adapters, and model/openai imports model.
//
// The table always holds "echo" (kind echo, model "echo"). Setting any of
// OPENAI_BASE_URL, OPENAI_API_KEY or SUBAGENTD_MODEL adds the route "openai"
// and makes it the default. Each models: entry of cfg adds an
// OpenAI-compatible route whose key is read from the variable its apiKeyEnv
// names. The default is cfg's defaultModel when set, else "openai" when the
// environment configured it, else "echo". cfg may be nil (no config file).
//
// Keys are never logged: each route is logged with its name, kind and model
// (a config route whose key variable is empty gets a warning naming the
// variable). Returns an error when the environment route has
// a custom base URL but no SUBAGENTD_MODEL, when a configured route is named
// "openai" while the environment also configures it, or when an adapter
// rejects its settings.
func routesFromConfig(cfg *cfgfile.File, getenv func(string) string, log *slog.Logger) (*model.Routes, error) {
	if cfg == nil {
		cfg = &cfgfile.File{}
	}
	routes := []model.Route{{Name: cfgfile.EchoModel, Kind: model.KindEcho, DefaultModel: cfgfile.EchoModel, Model: echo.New()}}
	def := cfgfile.EchoModel
	baseURL, key, modelName := getenv(envBaseURL), getenv(envAPIKey), getenv(envModel)
	if baseURL != "" || key != "" || modelName != "" {
		if modelName == "" {
			if baseURL != "" && baseURL != openai.DefaultBaseURL {
				return nil, fmt.Errorf("model route %q: %s is set but %s is not: name the model the server should run", envRoute, envBaseURL, envModel)
			}
			modelName = defaultOpenAIModel
		}
		rt, err := openAIRoute(envRoute, openai.Config{BaseURL: baseURL, APIKey: key, DefaultModel: modelName, MaxRetries: cfgfile.DefaultMaxRetries})
		if err != nil {
			return nil, err
		}
		routes = append(routes, rt)
		def = envRoute
	}
	for _, mc := range cfg.Models {
		if mc.Name == envRoute && def == envRoute {
			return nil, fmt.Errorf("model route %q is configured both in the config file and by the %s/%s/%s environment", envRoute, envBaseURL, envAPIKey, envModel)
		}
		key := ""
		if mc.APIKeyEnv != "" {
			if key = getenv(mc.APIKeyEnv); key == "" {
				log.Warn("model route has no API key: its variable is empty", slog.String("route", mc.Name), slog.String("apiKeyEnv", mc.APIKeyEnv))
			}
		}
		rt, err := openAIRoute(mc.Name, openai.Config{BaseURL: mc.BaseURL, APIKey: key, DefaultModel: mc.Model, Timeout: mc.Timeout, MaxRetries: mc.MaxRetries})
		if err != nil {
			return nil, err
		}
		routes = append(routes, rt)
	}
	if cfg.DefaultModel != "" {
		def = cfg.DefaultModel
	}
	table, err := model.NewRoutes(def, routes...)
	if err != nil {
		return nil, fmt.Errorf("model routes: %w", err)
	}
	for _, rt := range routes {
		log.Info("model route", slog.String("route", rt.Name), slog.String("kind", rt.Kind),
			slog.String("model", rt.DefaultModel), slog.Bool("default", rt.Name == def))
	}
	return table, nil
}

// openAIRoute returns an OpenAI-compatible route named name.
func openAIRoute(name string, c openai.Config) (model.Route, error) {
	m, err := openai.New(c)
	if err != nil {
		return model.Route{}, fmt.Errorf("model route %q: %w", name, err)
	}
	return model.Route{Name: name, Kind: model.KindOpenAI, DefaultModel: c.DefaultModel, Model: m}, nil
}
