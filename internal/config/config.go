// Package config reads the SUBAGENTD_CONFIG file (docs/architecture.md §9): the ACP agents
// the service may run as providers, the model routes of in-process agents, the
// default route and the workspace roots that every child cwd must lie in.
//
// The file is YAML. Unknown keys are an error, and every error names the line
// it is about, so a typo never silently disables a setting.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/subagentd/subagentd/internal/store"
)

// Provider and model types, permission policies and defaults.
const (
	TypeACP    = "acp"
	TypeA2A    = "a2a"
	TypeOpenAI = "openai"

	// PermissionReject declines every session/request_permission (default).
	PermissionReject = "reject"
	// PermissionAllow grants tool permissions the agent asks for.
	PermissionAllow = "allow"
	// PermissionAsk asks a person: each request becomes a pending approval
	// (internal/governance) that the agent waits on.
	PermissionAsk = "ask"

	// OnTimeoutReject answers an approval that timed out with the agent's
	// reject option; OnTimeoutCancel answers it "cancelled".
	OnTimeoutReject = "reject"
	OnTimeoutCancel = "cancel"

	DefaultDisposeEOFGrace = 6 * time.Second
	DefaultDisposeGrace    = 3 * time.Second
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultMaxRetries      = 2

	// EchoModel is the built-in deterministic model route; a configured
	// route cannot take its name.
	EchoModel = "echo"
)

// File is a parsed and validated configuration file.
type File struct {
	// Providers are the configured ACP agents, in file order.
	Providers []ProviderConfig
	// Models are the model routes of in-process agents, in file order.
	Models []ModelConfig
	// DefaultModel names the route used when a session names none: one of
	// Models, EchoModel, or "" (the caller's default).
	DefaultModel string
	// WorkspaceRoots are absolute, cleaned directories; every session and
	// ACP agent cwd must lie inside one. Never empty after Load: the
	// default is the directory the service started in.
	WorkspaceRoots []string
	// Tokens are the API tokens of the file's tokens: list, by SHA-256;
	// SUBAGENTD_TOKENS adds more (ParseTokens).
	Tokens []store.Token
	// WebhooksAllowPrivate (webhooks: allowPrivate:) lets webhook
	// deliveries reach loopback, private and link-local addresses;
	// SUBAGENTD_WEBHOOK_ALLOW_PRIVATE=true does too.
	WebhooksAllowPrivate bool
}

// ProviderConfig is one ACP agent run as a provider, or one remote A2A
// agent (docs/seam.md §2). An A2A provider has only Name, Type, URL and
// BearerEnv; the other fields are the ACP agent's.
type ProviderConfig struct {
	// Name is the provider name: [a-z0-9][a-z0-9_-]*, unique, not spawn or fork.
	Name string
	// Type is TypeACP or TypeA2A.
	Type string
	// URL is an A2A agent's card URL, absolute http(s).
	URL string
	// BearerEnv names the environment variable holding the bearer token
	// every call to the A2A agent carries, the card fetch included; ""
	// sends none.
	BearerEnv string
	// Command and Args are the only program the provider ever runs; nothing
	// in a request can change them.
	Command string
	Args    []string
	// Env entries are the agent's environment besides the few variables it
	// inherits from the service (PATH, HOME, LANG, TERM, TMPDIR); they win
	// over those.
	Env map[string]string
	// Cwd is an absolute existing directory (a relative one in the file is
	// resolved once, against the start directory), or "" to run each child
	// in its parent session's cwd.
	Cwd string
	// Permission is PermissionReject, PermissionAllow or PermissionAsk:
	// the answer to a permission request that no rule matches.
	Permission string
	// Rules refine Permission by tool kind and title; the first that
	// matches decides (PermissionFor).
	Rules []PermissionRule
	// ApprovalTimeout bounds how long an approval waits for a person; 0
	// waits until the turn ends. OnTimeout (OnTimeoutReject, the default
	// when a timeout is set, or OnTimeoutCancel) is the answer the agent
	// then gets.
	ApprovalTimeout time.Duration
	OnTimeout       string
	// DisposeEOFGrace is how long disposal waits after closing the agent's
	// stdin before SIGTERM; DisposeGrace how long after SIGTERM before
	// SIGKILL. Both positive.
	DisposeEOFGrace time.Duration
	DisposeGrace    time.Duration
	// IdleTimeout is how long the agent of a continuable child stays
	// running after the child's last turn, ready for a followup; after it
	// the process is stopped and a followup resumes the ACP session in a new
	// one. 0 stops it when each activation settles.
	IdleTimeout time.Duration
}

// ToolKinds are the ACP tool kinds a rule may name.
var ToolKinds = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"}

// PermissionRule is one rule of a provider's permission policy.
type PermissionRule struct {
	// Kind is one of ToolKinds; a tool call that names no kind counts as
	// "other".
	Kind string
	// TitlePattern, when set, must also match the tool call's title (a Go
	// regular expression, unanchored).
	TitlePattern *regexp.Regexp
	// Decision is PermissionAllow, PermissionReject or PermissionAsk.
	Decision string
}

// PermissionFor is the policy's answer to a tool call of kind and title:
// the decision of the first rule that matches, else Permission.
func (pc ProviderConfig) PermissionFor(kind, title string) string {
	if kind == "" {
		kind = "other"
	}
	for _, r := range pc.Rules {
		if r.Kind == kind && (r.TitlePattern == nil || r.TitlePattern.MatchString(title)) {
			return r.Decision
		}
	}
	return pc.Permission
}

// MayAsk reports whether the policy can ask a person for some tool call.
func (pc ProviderConfig) MayAsk() bool {
	if pc.Permission == PermissionAsk {
		return true
	}
	for _, r := range pc.Rules {
		if r.Decision == PermissionAsk {
			return true
		}
	}
	return false
}

// ModelConfig is one OpenAI-compatible model route.
type ModelConfig struct {
	// Name is the route name: [a-z0-9][a-z0-9_-]*, unique, not EchoModel.
	Name string
	// Type is TypeOpenAI.
	Type string
	// BaseURL is an http(s) URL, or "" for the SDK's default (OpenAI).
	BaseURL string
	// APIKeyEnv names the environment variable holding the key ("" for
	// servers that need none). The key itself never appears in the file.
	APIKeyEnv string
	// Model is the model id sent to the server.
	Model string
	// Timeout bounds one model request, the whole streamed answer
	// included; 0 means the adapter's default (openai.DefaultTimeout, 10
	// minutes).
	Timeout time.Duration
	// MaxRetries is the retry count for failed requests (default 2).
	MaxRetries int
}

// Error is one problem in the file. Line is 1-based, or 0 when the problem has
// no place in the file.
type Error struct {
	Line    int
	Message string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Message)
	}
	return e.Message
}

// Load reads and validates the file at path; relative paths inside it are
// resolved against the current directory. Errors name the file and, through
// *Error values (joined when there are several), the lines.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return f, nil
}

// Parse validates a configuration document; relative paths inside it are
// resolved against the current directory. It returns *Error values (joined
// when validation finds several).
func Parse(data []byte) (*File, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("config: start directory: %w", err)
	}
	return parse(data, wd)
}

// ResolveWorkdir returns dir with its symlinks resolved, or why it cannot
// be a child's working directory: it must be absolute, an existing
// directory the service can enter, and inside one of roots once symlinks
// are resolved (so a link cannot lead out of a root). Callers start the
// child in the returned path, the one that was checked, so a link swapped
// after the check cannot move it out. The messages are safe to show to API
// clients.
func ResolveWorkdir(dir string, roots []string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%q is not an absolute path", dir)
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%q does not exist", dir)
	case err != nil:
		return "", fmt.Errorf("%q cannot be inspected", dir)
	case !st.IsDir():
		return "", fmt.Errorf("%q is not a directory", dir)
	}
	if unix.Access(dir, unix.X_OK) != nil {
		return "", fmt.Errorf("%q cannot be entered (no search permission)", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("%q cannot be resolved", dir)
	}
	for _, root := range roots {
		if r, err := filepath.EvalSymlinks(root); err == nil && within(real, r) {
			return real, nil
		}
	}
	return "", fmt.Errorf("%q is outside the workspace roots", dir)
}

// within reports whether dir is root or lies below it; both are clean and
// absolute.
func within(dir, root string) bool {
	rel, err := filepath.Rel(root, dir)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
