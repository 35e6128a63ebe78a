package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRun_RefusesOpenAddressWithoutTokens: without tokens the server does
// not listen beyond loopback, and says how to fix it in one line.
func TestRun_RefusesOpenAddressWithoutTokens(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		logs := newLogLines(t)
		go func() {
			for range logs.lines {
			}
		}()
		err := run(t.Context(), nil, env(map[string]string{"SUBAGENTD_ADDR": addr}), logs.w)
		logs.w.Close()
		if err == nil || !strings.Contains(err.Error(), "SUBAGENTD_TOKENS") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("%s without tokens: %v; want a one-line refusal naming SUBAGENTD_TOKENS", addr, err)
		}
	}
}

// TestRun_TokensOpenEveryInterface: with a token the server listens on
// every interface, answers any Host, and wants the token on /v1.
func TestRun_TokensOpenEveryInterface(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := newLogLines(t)
	done := make(chan error, 1)
	const token = "0123456789abcdef-secret"
	go func() {
		done <- run(ctx, nil, env(map[string]string{"SUBAGENTD_ADDR": "0.0.0.0:0", "SUBAGENTD_TOKENS": "acme:" + token}), logs.w)
		logs.w.Close()
	}()
	addr := logs.until(t, "listening")["addr"].(string)
	port := addr[strings.LastIndex(addr, ":"):]
	get := func(auth string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1"+port+"/v1/providers", nil)
		req.Host = "subagentd.example" + port
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET /v1/providers: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(""); got != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", got)
	}
	if got := get("Bearer " + token); got != http.StatusOK {
		t.Errorf("with the token: %d, want 200", got)
	}
	cancel()
	go func() {
		for range logs.lines {
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(shutdownGrace):
		t.Fatal("run did not return")
	}
}

// TestRun_BadSecuritySettings: malformed tokens, origins and limits stop
// the start with an error naming the variable.
func TestRun_BadSecuritySettings(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"no colon":      {"SUBAGENTD_TOKENS": "justatokenwithoutatenant"},
		"short token":   {"SUBAGENTD_TOKENS": "acme:short"},
		"bad tenant":    {"SUBAGENTD_TOKENS": "a b:0123456789abcdefgh"},
		"bad origin":    {"SUBAGENTD_CORS_ORIGINS": "app.example"},
		"origin path":   {"SUBAGENTD_CORS_ORIGINS": "https://app.example/x"},
		"live runs":     {"SUBAGENTD_MAX_LIVE_RUNS": "-1"},
		"streams":       {"SUBAGENTD_MAX_STREAMS": "many"},
		"rate":          {"SUBAGENTD_RATE_LIMIT": "NaN"},
		"rate negative": {"SUBAGENTD_RATE_LIMIT": "-3"},
	} {
		logs := newLogLines(t)
		go func() {
			for range logs.lines {
			}
		}()
		vars["SUBAGENTD_ADDR"] = "127.0.0.1:0"
		err := run(t.Context(), nil, env(vars), logs.w)
		logs.w.Close()
		if err == nil || !strings.Contains(err.Error(), "SUBAGENTD_") {
			t.Errorf("%s: %v, want an error naming the variable", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdefgh") {
			t.Errorf("%s: the error repeats the token: %v", name, err)
		}
	}
	// Given as a flag, a bad value is named by the flag.
	err := run(t.Context(), []string{"-tokens", "acme:short"}, env(map[string]string{"SUBAGENTD_ADDR": "127.0.0.1:0"}), io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "-tokens: entry 1") {
		t.Errorf("-tokens acme:short: %v, want an error naming -tokens", err)
	}
}
