package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	cfgfile "github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/model"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRoutesFromConfig_Table(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       *cfgfile.File
		env       map[string]string
		names     []string
		def       string
		defModel  string
		wantError string
	}{
		{name: "nothing configured: echo only", names: []string{"echo"}, def: "echo", defModel: "echo"},
		{name: "environment route becomes the default",
			env:   map[string]string{envBaseURL: "http://127.0.0.1:11434/v1", envModel: "llama3.1"},
			names: []string{"echo", "openai"}, def: "openai", defModel: "llama3.1"},
		{name: "API key alone means OpenAI with the default model",
			env:   map[string]string{envAPIKey: "sk-test"},
			names: []string{"echo", "openai"}, def: "openai", defModel: defaultOpenAIModel},
		{name: "model alone means OpenAI with that model",
			env:   map[string]string{envModel: "gpt-4.1"},
			names: []string{"echo", "openai"}, def: "openai", defModel: "gpt-4.1"},
		{name: "custom server without a model name",
			env:       map[string]string{envBaseURL: "http://127.0.0.1:8000/v1"},
			wantError: "SUBAGENTD_MODEL is not"},
		{name: "invalid environment base URL",
			env:       map[string]string{envBaseURL: "ftp://x", envModel: "m"},
			wantError: `model route "openai"`},
		{name: "config routes, echo stays the default",
			cfg:   &cfgfile.File{Models: []cfgfile.ModelConfig{{Name: "local", Type: "openai", BaseURL: "http://127.0.0.1:1/v1", Model: "qwen"}}},
			names: []string{"echo", "local"}, def: "echo", defModel: "echo"},
		{name: "defaultModel picks a config route over the environment",
			cfg: &cfgfile.File{DefaultModel: "local", Models: []cfgfile.ModelConfig{
				{Name: "local", Type: "openai", BaseURL: "http://127.0.0.1:1/v1", Model: "qwen"}}},
			env:   map[string]string{envModel: "gpt-4.1"},
			names: []string{"echo", "openai", "local"}, def: "local", defModel: "qwen"},
		{name: "defaultModel echo over the environment",
			cfg:   &cfgfile.File{DefaultModel: "echo"},
			env:   map[string]string{envModel: "gpt-4.1"},
			names: []string{"echo", "openai"}, def: "echo", defModel: "echo"},
		{name: "config route named openai clashes with the environment",
			cfg:       &cfgfile.File{Models: []cfgfile.ModelConfig{{Name: "openai", Type: "openai", Model: "m"}}},
			env:       map[string]string{envModel: "gpt-4.1"},
			wantError: "configured both"},
		{name: "config route named openai without the environment",
			cfg:   &cfgfile.File{Models: []cfgfile.ModelConfig{{Name: "openai", Type: "openai", Model: "m"}}},
			names: []string{"echo", "openai"}, def: "echo", defModel: "echo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			routes, err := routesFromConfig(tt.cfg, env(tt.env), discard())
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := routes.Names(); !slices.Equal(got, tt.names) {
				t.Errorf("Names = %v, want %v", got, tt.names)
			}
			if d := routes.Default(); d.Name != tt.def || d.DefaultModel != tt.defModel {
				t.Errorf("Default = %s/%s, want %s/%s", d.Name, d.DefaultModel, tt.def, tt.defModel)
			}
			echo, _, err := routes.Resolve("echo", "")
			if err != nil || echo.Kind != model.KindEcho || echo.DefaultModel != "echo" {
				t.Errorf("echo route = %+v, %v", echo, err)
			}
		})
	}
}

// TestRoutesFromConfig_APIKeyFromNamedVariableNeverLogged checks that a
// config route sends the key held by the variable its apiKeyEnv names, and
// that neither key appears in the log.
func TestRoutesFromConfig_APIKeyFromNamedVariableNeverLogged(t *testing.T) {
	t.Parallel()
	auth := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}))
	defer srv.Close()
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	cfg := &cfgfile.File{Models: []cfgfile.ModelConfig{
		{Name: "local", Type: "openai", BaseURL: srv.URL + "/v1", APIKeyEnv: "LOCAL_KEY", Model: "qwen"},
		{Name: "nokey", Type: "openai", BaseURL: srv.URL + "/v1", APIKeyEnv: "UNSET_KEY", Model: "qwen"},
	}}
	routes, err := routesFromConfig(cfg, env(map[string]string{"LOCAL_KEY": "sk-local-secret", envAPIKey: "sk-env-secret"}), log)
	if err != nil {
		t.Fatal(err)
	}
	rt, name, err := routes.Resolve("local", "")
	if err != nil || name != "qwen" {
		t.Fatalf("Resolve = %q, %v", name, err)
	}
	var streamErr error
	for _, err := range rt.Model.Stream(context.Background(), model.Request{Model: name,
		Messages: []model.Message{{Role: model.RoleUser, Content: []model.Block{model.TextBlock("hi")}}}}) {
		if err != nil {
			streamErr = err
		}
	}
	if streamErr == nil || strings.Contains(streamErr.Error(), "secret") {
		t.Errorf("stream error = %v, want a 401 error without the key", streamErr)
	}
	if got := <-auth; got != "Bearer sk-local-secret" {
		t.Errorf("Authorization = %q, want the key of LOCAL_KEY", got)
	}
	logged := logBuf.String()
	if strings.Contains(logged, "secret") {
		t.Errorf("log contains a key:\n%s", logged)
	}
	if !strings.Contains(logged, "UNSET_KEY") {
		t.Errorf("log does not warn about the empty variable UNSET_KEY:\n%s", logged)
	}
}
