package acp

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	sdk "github.com/coder/acp-go-sdk"
)

// maxDetail bounds each string an agent adds to a JSON-RPC error (its
// data.message and data.details): enough for "unexpected status 401
// Unauthorized: invalid x-api-key …", never a whole response body.
const maxDetail = 512

// rpcMessage is the diagnostic of a JSON-RPC error an agent sent: its
// message, then the strings data.message and data.details when they say
// more — agents such as codex answer "Internal error" and put the reason
// (a model's 401, say) there. The data strings are bounded (settlement
// bounds the whole), and credentials are redacted.
func (p *Provider) rpcMessage(re *sdk.RequestError) string {
	parts := []string{re.Message}
	if re.Message == "" {
		parts[0] = fmt.Sprintf("JSON-RPC error %d", re.Code)
	}
	if data, ok := re.Data.(map[string]any); ok {
		for _, key := range []string{"message", "details"} {
			s, _ := data[key].(string)
			s = strings.TrimSpace(s)
			if s != "" && !slices.Contains(parts, s) {
				parts = append(parts, bound(s, maxDetail))
			}
		}
	}
	return p.redact(strings.Join(parts, ": "))
}

// tokenPattern matches what commonly is a credential in an error text: a
// bearer token, an sk-/pk-/rk- style API key, a key=value pair naming a key
// or token.
var tokenPattern = regexp.MustCompile(`(?i)(bearer\s+)[^\s"',;]+|\b((?:sk|pk|rk)-[A-Za-z0-9_\-]{6,})|((?:api[_-]?key|token|secret|password)["']?\s*[=:]\s*["']?)[^\s"',;]+`)

// redact removes credentials from s: the values of the variables that hold
// them in the service's and the agent's environment (minSecret bytes or
// longer), and anything tokenPattern recognises.
func (p *Provider) redact(s string) string {
	for _, v := range p.secretValues() {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return tokenPattern.ReplaceAllStringFunc(s, func(m string) string {
		sub := tokenPattern.FindStringSubmatch(m)
		switch {
		case sub[1] != "":
			return sub[1] + "[redacted]"
		case sub[3] != "":
			return sub[3] + "[redacted]"
		}
		return "[redacted]"
	})
}

// minSecret is the shortest value treated as a secret: shorter values
// ("1", "true") would redact ordinary words.
const minSecret = 6

// secretValues are the credential values an agent might echo: those of the
// configured env entries and the service environment whose names mark a
// credential, and of the model routes' key variables.
func (p *Provider) secretValues() []string {
	var out []string
	add := func(name, value string) {
		if len(value) >= minSecret && (credentialName(name) || slices.Contains(p.secretEnv, name)) {
			out = append(out, value)
		}
	}
	for name, value := range p.cfg.Env {
		add(name, value)
	}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(strings.ToUpper(name), "SUBAGENTD_") {
			add(name, value)
		}
	}
	// Longest first, so a secret that contains another is removed whole.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// credentialWords mark the names of variables that usually hold a
// credential (case-insensitive).
var credentialWords = []string{"KEY", "PASSWORD", "SECRET", "TOKEN", "CREDENTIAL", "DSN"}

// credentialName reports whether a variable's name marks a credential, or
// a URL that usually embeds one (DATABASE_URL).
func credentialName(name string) bool {
	upper := strings.ToUpper(name)
	for _, w := range credentialWords {
		if strings.Contains(upper, w) {
			return true
		}
	}
	return upper == "DATABASE_URL"
}

// bound cuts s to at most n bytes on a character boundary, marking a cut
// with "…".
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
