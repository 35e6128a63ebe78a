package delegate

import (
	"fmt"
	"log/slog"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/model/echo"
	"github.com/subagentd/subagentd/internal/model/openai"
)

// Route kinds (model.Route.Kind). KindEcho is the offline deterministic
// model; dashboards and /v1/providers label it as such.
const (
	KindEcho   = "echo"
	KindOpenAI = "openai"
)

// Environment variables of the OpenAI-compatible environment route
// (DESIGN §6).
const (
	EnvBaseURL = "OPENAI_BASE_URL"
	EnvAPIKey  = "OPENAI_API_KEY"
	EnvModel   = "SUBAGENTD_MODEL"
)

// EnvRoute is the name of the route the OPENAI_* variables configure.
const EnvRoute = "openai"

// DefaultOpenAIModel is requested by the environment route when only
// OPENAI_API_KEY is set: the key alone means api.openai.com, where this
// small model exists. Any other server needs SUBAGENTD_MODEL.
const DefaultOpenAIModel = "gpt-4o-mini"

// RoutesFromConfig builds the model route table of in-process agents
// (DESIGN §6). It lives here rather than in internal/model because it needs
// both config and the model adapters, and model/openai imports model.
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
func RoutesFromConfig(cfg *config.File, getenv func(string) string, log *slog.Logger) (*model.Routes, error) {
	if cfg == nil {
		cfg = &config.File{}
	}
	routes := []model.Route{{Name: config.EchoModel, Kind: KindEcho, DefaultModel: config.EchoModel, Model: echo.New()}}
	def := config.EchoModel
	baseURL, key, modelName := getenv(EnvBaseURL), getenv(EnvAPIKey), getenv(EnvModel)
	if baseURL != "" || key != "" || modelName != "" {
		if modelName == "" {
			if baseURL != "" && baseURL != openai.DefaultBaseURL {
				return nil, fmt.Errorf("model route %q: %s is set but %s is not: name the model the server should run", EnvRoute, EnvBaseURL, EnvModel)
			}
			modelName = DefaultOpenAIModel
		}
		rt, err := openAIRoute(EnvRoute, openai.Config{BaseURL: baseURL, APIKey: key, DefaultModel: modelName, MaxRetries: config.DefaultMaxRetries})
		if err != nil {
			return nil, err
		}
		routes = append(routes, rt)
		def = EnvRoute
	}
	for _, mc := range cfg.Models {
		if mc.Name == EnvRoute && def == EnvRoute {
			return nil, fmt.Errorf("model route %q is configured both in the config file and by the %s/%s/%s environment", EnvRoute, EnvBaseURL, EnvAPIKey, EnvModel)
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
	return model.Route{Name: name, Kind: KindOpenAI, DefaultModel: c.DefaultModel, Model: m}, nil
}
