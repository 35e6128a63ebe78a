package config

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/subagentd/subagentd/internal/store"
)

// The wire structs mirror the file. Pointers tell an absent key from an empty
// one, and durations stay strings so that a bad value is reported with its
// line (the YAML library reports duration errors without a position).
type fileYAML struct {
	Providers      []providerYAML `yaml:"providers"`
	Models         []modelYAML    `yaml:"models"`
	DefaultModel   string         `yaml:"defaultModel"`
	WorkspaceRoots []string       `yaml:"workspaceRoots"`
	Tokens         []tokenYAML    `yaml:"tokens"`
	Webhooks       webhooksYAML   `yaml:"webhooks"`
}

// webhooksYAML is the webhooks: section.
type webhooksYAML struct {
	AllowPrivate bool `yaml:"allowPrivate"`
}

// tokenYAML is one API token by its SHA-256 (hex), never the token itself.
type tokenYAML struct {
	Tenant string `yaml:"tenant"`
	SHA256 string `yaml:"sha256"`
}

type providerYAML struct {
	Name            string            `yaml:"name"`
	Type            string            `yaml:"type"`
	Command         string            `yaml:"command"`
	Args            []string          `yaml:"args"`
	Env             map[string]string `yaml:"env"`
	Cwd             *string           `yaml:"cwd"`
	Permission      string            `yaml:"permission"`
	Rules           []ruleYAML        `yaml:"rules"`
	ApprovalTimeout *string           `yaml:"approvalTimeout"`
	OnTimeout       string            `yaml:"onTimeout"`
	DisposeEOFGrace *string           `yaml:"disposeEofGrace"`
	DisposeGrace    *string           `yaml:"disposeGrace"`
	IdleTimeout     *string           `yaml:"idleTimeout"`
	URL             string            `yaml:"url"`
	Auth            *authYAML         `yaml:"auth"`
}

// authYAML is an A2A provider's auth: section.
type authYAML struct {
	BearerEnv string `yaml:"bearerEnv"`
}

// maxURLLen bounds an A2A provider's card URL.
const maxURLLen = 2048

// ruleYAML is one rule of a provider's permission policy.
type ruleYAML struct {
	Kind         string  `yaml:"kind"`
	TitlePattern *string `yaml:"titlePattern"`
	Decision     string  `yaml:"decision"`
}

// maxRules bounds a provider's rules; maxTitlePattern a rule's pattern.
const (
	maxRules        = 64
	maxTitlePattern = 512
)

type modelYAML struct {
	Name       string  `yaml:"name"`
	Type       string  `yaml:"type"`
	BaseURL    string  `yaml:"baseURL"`
	APIKeyEnv  string  `yaml:"apiKeyEnv"`
	Model      string  `yaml:"model"`
	Timeout    *string `yaml:"timeout"`
	MaxRetries *int    `yaml:"maxRetries"`
}

var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	// maxProviderNameLen keeps "subagent_<name>" within 64 characters.
	maxProviderNameLen = 64 - len("subagent_")
	envKeyPattern      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// maxNameLen bounds provider and route names, which appear in URLs and logs.
const maxNameLen = 64

// reservedProviders are always registered by the service itself.
var reservedProviders = map[string]bool{"spawn": true, "fork": true}

// parse decodes data strictly and validates it, resolving relative paths
// against startDir.
func parse(data []byte, startDir string) (*File, error) {
	var raw fileYAML
	if err := yaml.UnmarshalWithOptions(data, &raw, yaml.Strict()); err != nil {
		return nil, decodeError(err)
	}
	doc, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, decodeError(err)
	}
	v := &validator{doc: doc}
	f := v.file(raw, startDir)
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	return f, nil
}

// decodeError turns a YAML library error into an *Error with its line.
func decodeError(err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		return &Error{Line: ye.GetToken().Position.Line, Message: ye.GetMessage()}
	}
	return &Error{Message: err.Error()}
}

// validator converts the wire structs, collecting every problem with the
// line of the value it concerns.
type validator struct {
	doc  *ast.File
	errs []error
}

// at is a position in the document: map keys (string) and list indexes (int)
// from the root.
type at []any

func (p at) with(elems ...any) at { return append(append(at{}, p...), elems...) }

func (p at) String() string {
	var sb strings.Builder
	for _, e := range p {
		switch e := e.(type) {
		case int:
			sb.WriteString("[" + strconv.Itoa(e) + "]")
		case string:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(e)
		}
	}
	return sb.String()
}

// fail records a problem at p. A missing key has no node, so the line is
// that of the nearest enclosing node that exists.
func (v *validator) fail(p at, format string, args ...any) {
	v.errs = append(v.errs, &Error{
		Line:    v.line(p),
		Message: p.String() + ": " + fmt.Sprintf(format, args...),
	})
}

func (v *validator) line(p at) int {
	for n := len(p); n > 0; n-- {
		b := (&yaml.PathBuilder{}).Root()
		for _, e := range p[:n] {
			switch e := e.(type) {
			case int:
				b = b.Index(uint(e))
			case string:
				b = b.Child(e)
			}
		}
		node, err := b.Build().FilterFile(v.doc)
		if err == nil && node != nil && node.GetToken() != nil {
			return node.GetToken().Position.Line
		}
	}
	return 0
}

func (v *validator) file(raw fileYAML, startDir string) *File {
	f := &File{DefaultModel: raw.DefaultModel, WebhooksAllowPrivate: raw.Webhooks.AllowPrivate}
	for i, r := range raw.WorkspaceRoots {
		if !filepath.IsAbs(r) {
			v.fail(at{"workspaceRoots", i}, "%q is not an absolute path", r)
			continue
		}
		f.WorkspaceRoots = append(f.WorkspaceRoots, filepath.Clean(r))
	}
	switch {
	case raw.WorkspaceRoots == nil:
		f.WorkspaceRoots = []string{startDir}
	case len(raw.WorkspaceRoots) == 0:
		// An empty list would refuse every cwd; omit the key for the default.
		v.fail(at{"workspaceRoots"}, "must list at least one directory (omit it for the start directory)")
	}

	seen := map[string]bool{}
	for i, r := range raw.Providers {
		p := at{"providers", i}
		pc := v.provider(p, r, startDir, f.WorkspaceRoots)
		if seen[pc.Name] {
			v.fail(p.with("name"), "duplicate provider name %q", pc.Name)
		}
		seen[pc.Name] = true
		f.Providers = append(f.Providers, pc)
	}

	seen = map[string]bool{}
	for i, r := range raw.Models {
		p := at{"models", i}
		mc := v.model(p, r)
		if seen[mc.Name] {
			v.fail(p.with("name"), "duplicate model name %q", mc.Name)
		}
		seen[mc.Name] = true
		f.Models = append(f.Models, mc)
	}
	if d := raw.DefaultModel; d != "" && d != EchoModel && !seen[d] {
		v.fail(at{"defaultModel"}, "%q is not a configured model (nor %q)", d, EchoModel)
	}
	hashes := map[[32]byte]bool{}
	for i, r := range raw.Tokens {
		p := at{"tokens", i}
		if msg := checkTenant(r.Tenant); msg != "" {
			v.fail(p.with("tenant"), "%s", msg)
		}
		h, ok := parseHash(r.SHA256)
		switch {
		case !ok:
			v.fail(p.with("sha256"), "must be the token's SHA-256 as 64 hex digits (printf %%s TOKEN | sha256sum)")
		case hashes[h]:
			v.fail(p.with("sha256"), "the same token is listed twice")
		}
		hashes[h] = true
		f.Tokens = append(f.Tokens, store.Token{Tenant: r.Tenant, Hash: h})
	}
	return f
}

func (v *validator) name(p at, name string) {
	switch {
	case name == "":
		v.fail(p, "is required")
	case len(name) > maxNameLen:
		v.fail(p, "%q is longer than %d characters", name, maxNameLen)
	case !namePattern.MatchString(name):
		v.fail(p, "%q must match [a-z0-9][a-z0-9_-]*", name)
	}
}

func (v *validator) provider(p at, r providerYAML, startDir string, roots []string) ProviderConfig {
	if r.Type == TypeA2A {
		return v.a2aProvider(p, r)
	}
	pc := ProviderConfig{
		Name:            r.Name,
		Type:            r.Type,
		Command:         r.Command,
		Args:            r.Args,
		Env:             r.Env,
		Permission:      r.Permission,
		DisposeEOFGrace: v.grace(p.with("disposeEofGrace"), r.DisposeEOFGrace, DefaultDisposeEOFGrace),
		DisposeGrace:    v.grace(p.with("disposeGrace"), r.DisposeGrace, DefaultDisposeGrace),
		IdleTimeout:     DefaultIdleTimeout,
	}
	if r.IdleTimeout != nil {
		d, err := time.ParseDuration(*r.IdleTimeout)
		if err != nil || d < 0 {
			v.fail(p.with("idleTimeout"), "%q must be a non-negative duration such as \"5m\"", *r.IdleTimeout)
		}
		pc.IdleTimeout = d
	}
	v.providerName(p, r.Name)
	if pc.Type == "" {
		pc.Type = TypeACP
	} else if pc.Type != TypeACP {
		v.fail(p.with("type"), "%q is not a provider type (want %q or %q)", pc.Type, TypeACP, TypeA2A)
	}
	if r.URL != "" || r.Auth != nil {
		v.fail(p.with("type"), "url and auth are for providers of type %q", TypeA2A)
	}
	switch {
	case r.Command == "":
		v.fail(p.with("command"), "is required")
	case !filepath.IsAbs(r.Command) && strings.ContainsRune(r.Command, filepath.Separator):
		// A relative path would be resolved against the child's cwd, which
		// a client picks (a session's cwd): pin it to the start directory
		// now, so that nothing in a request can change what runs.
		pc.Command = filepath.Join(startDir, r.Command)
	}
	for k := range r.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			v.fail(p.with("env"), "%q is not an environment variable name", k)
		}
	}
	switch pc.Permission {
	case "":
		pc.Permission = PermissionReject
	case PermissionReject, PermissionAllow, PermissionAsk:
	default:
		v.fail(p.with("permission"), "%q must be %q, %q or %q", pc.Permission, PermissionReject, PermissionAllow, PermissionAsk)
	}
	if len(r.Rules) > maxRules {
		v.fail(p.with("rules"), "has %d rules, more than %d", len(r.Rules), maxRules)
	}
	for i, rule := range r.Rules {
		pc.Rules = append(pc.Rules, v.rule(p.with("rules", i), rule))
	}
	if r.ApprovalTimeout != nil {
		d, err := time.ParseDuration(*r.ApprovalTimeout)
		if err != nil || d <= 0 {
			v.fail(p.with("approvalTimeout"), "%q must be a positive duration such as \"10m\"", *r.ApprovalTimeout)
		}
		pc.ApprovalTimeout = d
	}
	switch pc.OnTimeout = r.OnTimeout; pc.OnTimeout {
	case "":
		if r.ApprovalTimeout != nil {
			pc.OnTimeout = OnTimeoutReject
		}
	case OnTimeoutReject, OnTimeoutCancel:
		if r.ApprovalTimeout == nil {
			v.fail(p.with("onTimeout"), "needs approvalTimeout")
		}
	default:
		v.fail(p.with("onTimeout"), "%q must be %q or %q", pc.OnTimeout, OnTimeoutReject, OnTimeoutCancel)
	}
	if r.ApprovalTimeout != nil && !pc.MayAsk() {
		v.fail(p.with("approvalTimeout"), "applies only when permission or a rule is %q", PermissionAsk)
	}
	if r.Cwd != nil {
		pc.Cwd = v.cwd(p.with("cwd"), *r.Cwd, startDir, roots)
	}
	return pc
}

// providerName checks a provider's name.
func (v *validator) providerName(p at, name string) {
	v.name(p.with("name"), name)
	if len(name) > maxProviderNameLen {
		// Its delegation tool is subagent_<name>, and OpenAI-compatible
		// servers refuse tool names over 64 characters.
		v.fail(p.with("name"), "%q is longer than %d characters", name, maxProviderNameLen)
	}
	if reservedProviders[name] {
		v.fail(p.with("name"), "%q is a built-in provider", name)
	}
}

// a2aProvider validates a remote A2A agent: a name, its card URL and
// its auth; none of an ACP agent's keys.
func (v *validator) a2aProvider(p at, r providerYAML) ProviderConfig {
	pc := ProviderConfig{Name: r.Name, Type: TypeA2A, URL: r.URL}
	v.providerName(p, r.Name)
	if r.Command != "" || r.Args != nil || r.Env != nil || r.Cwd != nil || r.Permission != "" || r.Rules != nil ||
		r.ApprovalTimeout != nil || r.OnTimeout != "" || r.DisposeEOFGrace != nil || r.DisposeGrace != nil || r.IdleTimeout != nil {
		v.fail(p.with("type"), "a provider of type %q takes only name, url and auth", TypeA2A)
	}
	switch u, err := url.Parse(r.URL); {
	case r.URL == "":
		v.fail(p.with("url"), "is required (the agent card URL)")
	case len(r.URL) > maxURLLen:
		v.fail(p.with("url"), "is longer than %d characters", maxURLLen)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil:
		v.fail(p.with("url"), "%q is not an http(s) URL without credentials", r.URL)
	}
	if r.Auth != nil {
		if !envKeyPattern.MatchString(r.Auth.BearerEnv) {
			v.fail(p.with("auth", "bearerEnv"), "%q is not an environment variable name", r.Auth.BearerEnv)
		}
		pc.BearerEnv = r.Auth.BearerEnv
	}
	return pc
}

// rule validates one permission rule.
func (v *validator) rule(p at, r ruleYAML) PermissionRule {
	out := PermissionRule{Kind: r.Kind, Decision: r.Decision}
	if !slices.Contains(ToolKinds, r.Kind) {
		v.fail(p.with("kind"), "%q must be one of %s", r.Kind, strings.Join(ToolKinds, ", "))
	}
	switch r.Decision {
	case PermissionAllow, PermissionReject, PermissionAsk:
	case "":
		v.fail(p.with("decision"), "is required")
	default:
		v.fail(p.with("decision"), "%q must be %q, %q or %q", r.Decision, PermissionAllow, PermissionReject, PermissionAsk)
	}
	if r.TitlePattern != nil {
		switch re, err := regexp.Compile(*r.TitlePattern); {
		case *r.TitlePattern == "":
			v.fail(p.with("titlePattern"), "must not be empty (omit it to match every title)")
		case len(*r.TitlePattern) > maxTitlePattern:
			v.fail(p.with("titlePattern"), "is longer than %d characters", maxTitlePattern)
		case err != nil:
			v.fail(p.with("titlePattern"), "%q is not a regular expression: %v", *r.TitlePattern, err)
		default:
			out.TitlePattern = re
		}
	}
	return out
}

// cwd resolves a configured working directory once, at load.
func (v *validator) cwd(p at, dir, startDir string, roots []string) string {
	if dir == "" {
		v.fail(p, "must not be empty (omit it to use the parent session's cwd)")
		return ""
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(startDir, dir)
	}
	dir = filepath.Clean(dir)
	if _, err := ResolveWorkdir(dir, roots); err != nil {
		v.fail(p, "%v", err)
	}
	return dir
}

func (v *validator) grace(p at, s *string, def time.Duration) time.Duration {
	if s == nil {
		return def
	}
	d, err := time.ParseDuration(*s)
	if err != nil || d <= 0 {
		v.fail(p, "%q must be a positive duration such as \"3s\"", *s)
	}
	return d
}

func (v *validator) model(p at, r modelYAML) ModelConfig {
	mc := ModelConfig{
		Name:       r.Name,
		Type:       r.Type,
		BaseURL:    r.BaseURL,
		APIKeyEnv:  r.APIKeyEnv,
		Model:      r.Model,
		MaxRetries: DefaultMaxRetries,
	}
	v.name(p.with("name"), r.Name)
	if r.Name == EchoModel {
		v.fail(p.with("name"), "%q is the built-in model", r.Name)
	}
	if mc.Type == "" {
		mc.Type = TypeOpenAI
	} else if mc.Type != TypeOpenAI {
		v.fail(p.with("type"), "%q is not a model type (want %q)", mc.Type, TypeOpenAI)
	}
	if r.BaseURL != "" {
		u, err := url.Parse(r.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.fail(p.with("baseURL"), "%q is not an http(s) URL", r.BaseURL)
		}
	}
	if r.APIKeyEnv != "" && !envKeyPattern.MatchString(r.APIKeyEnv) {
		v.fail(p.with("apiKeyEnv"), "%q is not an environment variable name", r.APIKeyEnv)
	}
	if r.Model == "" {
		v.fail(p.with("model"), "is required")
	}
	if r.Timeout != nil {
		d, err := time.ParseDuration(*r.Timeout)
		if err != nil || d < 0 {
			v.fail(p.with("timeout"), "%q must be a non-negative duration such as \"2m\"", *r.Timeout)
		}
		mc.Timeout = d
	}
	if r.MaxRetries != nil {
		if *r.MaxRetries < 0 {
			v.fail(p.with("maxRetries"), "%d must not be negative", *r.MaxRetries)
		}
		mc.MaxRetries = *r.MaxRetries
	}
	return mc
}
