package governance

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// KindDelegate is the tool kind of an in-process agent's delegation: a
// person approves a child before it exists.
const KindDelegate = "delegate"

// PolicyKinds are the tool kinds a tree policy's rule may name: the ACP
// kinds and KindDelegate.
var PolicyKinds = append(slices.Clone(config.ToolKinds), KindDelegate)

// Bounds of a root's approvals policy.
const (
	MaxPolicyRules   = 64
	MaxTitlePattern  = 512
	MaxPolicyTimeout = 7 * 24 * time.Hour
)

// PolicyParams are the approvals policy a client sets on a root session:
// Mode and Rules as a provider's permission and rules, Timeout a Go
// duration ("" for none) and OnTimeout "reject" (the default with a
// timeout) or "cancel".
type PolicyParams struct {
	Mode      string
	Rules     []store.PolicyRule
	Timeout   string
	OnTimeout string
}

// CreatePolicy validates p and stores it as the policy of the tree of root
// session rootID, which must not exist yet (its creation follows). Returns
// EInvalidRequest naming each bad field (under "approvals."), and store
// errors.
func (a *Approvals) CreatePolicy(ctx context.Context, rootID string, p PolicyParams) error {
	tp, err := p.policy(rootID)
	if err != nil {
		return err
	}
	if err := a.st.CreateTreePolicy(ctx, tp); err != nil {
		return fmt.Errorf("approval: create the policy of %s: %w", rootID, err)
	}
	return nil
}

// policy is p checked, as stored for root.
func (p PolicyParams) policy(root string) (store.TreePolicy, error) {
	fields := map[string]string{}
	decision := func(d string) bool {
		return d == config.PermissionAllow || d == config.PermissionAsk || d == config.PermissionReject
	}
	if !decision(p.Mode) {
		fields["approvals.mode"] = `must be "allow", "ask" or "reject"`
	}
	if len(p.Rules) > MaxPolicyRules {
		fields["approvals.rules"] = fmt.Sprintf("must have at most %d items", MaxPolicyRules)
	}
	for i, r := range p.Rules[:min(len(p.Rules), MaxPolicyRules)] {
		at := fmt.Sprintf("approvals.rules[%d].", i)
		if !slices.Contains(PolicyKinds, r.Kind) {
			fields[at+"kind"] = "must be one of " + strings.Join(PolicyKinds, ", ")
		}
		if !decision(r.Decision) {
			fields[at+"decision"] = `must be "allow", "ask" or "reject"`
		}
		switch {
		case len(r.TitlePattern) > MaxTitlePattern || !utf8.ValidString(r.TitlePattern):
			fields[at+"titlePattern"] = fmt.Sprintf("must be UTF-8 text of at most %d bytes", MaxTitlePattern)
		case r.TitlePattern != "":
			if _, err := regexp.Compile(r.TitlePattern); err != nil {
				fields[at+"titlePattern"] = "is not a regular expression: " + err.Error()
			}
		}
	}
	tp := store.TreePolicy{RootID: root, Mode: p.Mode, Rules: slices.Clone(p.Rules), OnTimeout: p.OnTimeout}
	if p.Timeout != "" {
		d, err := time.ParseDuration(p.Timeout)
		if err != nil || d <= 0 || d > MaxPolicyTimeout {
			fields["approvals.timeout"] = fmt.Sprintf("must be a positive duration such as \"10m\", at most %s", MaxPolicyTimeout)
		}
		tp.Timeout = d
	}
	switch p.OnTimeout {
	case "":
		if p.Timeout != "" {
			tp.OnTimeout = config.OnTimeoutReject
		}
	case config.OnTimeoutReject, config.OnTimeoutCancel:
		if p.Timeout == "" {
			fields["approvals.onTimeout"] = "needs approvals.timeout"
		}
	default:
		fields["approvals.onTimeout"] = `must be "reject" or "cancel"`
	}
	if len(fields) > 0 {
		return store.TreePolicy{}, &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid approvals policy", Fields: fields}
	}
	return tp, nil
}

// Query is a tool call for a policy to answer: the asking session's, of
// tool Kind and Title, under the asking provider's own policy.
type Query struct {
	SessionID string
	// Provider holds the provider's permission, rules and approval
	// timeout.
	Provider config.ProviderConfig
	Kind     string
	Title    string
}

// Verdict is a policy's answer to a tool call: config.PermissionAllow,
// PermissionReject or PermissionAsk, and for ask how long the approval
// waits (0: until the turn ends) and the agent's answer then.
type Verdict struct {
	Decision  string
	Timeout   time.Duration
	OnTimeout string
}

// strictness orders decisions: the narrower wins.
var strictness = map[string]int{config.PermissionReject: 0, config.PermissionAsk: 1, config.PermissionAllow: 2}

// Policy answers q by the provider's policy narrowed by the policy of the
// session's tree: each says allow, ask or reject (the tree's first
// matching rule, else its mode; a tree without either leaves it to the
// provider), and the narrower of the two stands (reject, then ask, then
// allow), so nothing is allowed that either does not allow. A delegation
// (KindDelegate) is asked about only by the tree's delegate rules. What would be
// asked is answered by the tree's always rule for that kind and title, if
// a person made one. An approval waits for the shorter of the two
// timeouts, with that one's answer. Returns store errors: a caller then
// allows nothing.
func (a *Approvals) Policy(ctx context.Context, q Query) (Verdict, error) {
	kind := q.Kind
	if kind == "" {
		kind = "other"
	}
	v := Verdict{Decision: q.Provider.PermissionFor(kind, q.Title), Timeout: q.Provider.ApprovalTimeout, OnTimeout: q.Provider.OnTimeout}
	if kind == KindDelegate {
		// A provider's policy is about its agent's own tool calls: it
		// allows every delegation to it.
		v = Verdict{Decision: config.PermissionAllow}
	}
	tp, err := a.treePolicy(ctx, q.SessionID)
	if err != nil || tp == nil {
		return v, err
	}
	if d := treeDecision(*tp, kind, q.Title); d != "" && strictness[d] < strictness[v.Decision] {
		v.Decision = d
	}
	if v.Decision == config.PermissionAsk {
		// An always rule holds the title as its approval stored it.
		title := Clean(q.Title, MaxTitle)
		if i := slices.IndexFunc(tp.Always, func(r store.AlwaysRule) bool { return r.Kind == kind && r.Title == title }); i >= 0 {
			v.Decision = tp.Always[i].Decision
		}
	}
	if tp.Timeout > 0 && (v.Timeout <= 0 || tp.Timeout < v.Timeout) {
		v.Timeout, v.OnTimeout = tp.Timeout, tp.OnTimeout
	}
	return v, nil
}

// treeDecision is the decision of tp's first rule matching kind and
// title, else its mode ("" when it has none). A delegation is governed by
// delegate rules only: the mode is about agents' own tool calls.
func treeDecision(tp store.TreePolicy, kind, title string) string {
	for _, r := range tp.Rules {
		if r.Kind != kind {
			continue
		}
		// A stored pattern was compiled when it was created.
		if re, err := regexp.Compile(r.TitlePattern); err == nil && re.MatchString(title) {
			return r.Decision
		}
	}
	if kind == KindDelegate {
		return ""
	}
	return tp.Mode
}

// treePolicy returns the policy of session's tree, nil when its root set
// none.
func (a *Approvals) treePolicy(ctx context.Context, session string) (*store.TreePolicy, error) {
	sess, err := a.st.GetSession(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("approval: read session %s: %w", session, err)
	}
	root, err := a.root(ctx, sess)
	if err != nil {
		return nil, err
	}
	return a.RootPolicy(ctx, root)
}

// RootPolicy returns the policy of root session root's tree, nil when it
// has none.
func (a *Approvals) RootPolicy(ctx context.Context, root string) (*store.TreePolicy, error) {
	tp, err := a.st.TreePolicy(ctx, root)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("approval: read the policy of %s: %w", root, err)
	}
	return &tp, nil
}

// alwaysRule is the rule a decision with option kind adds to the tree of
// ap: an allow_always or reject_always option (an outcome with scope
// "always" maps onto one) answers that kind and title from now on. nil
// for a one-time option.
func alwaysRule(ap store.Approval, kind string) *store.AlwaysRule {
	d := config.PermissionAllow
	switch kind {
	case KindAllowAlways:
	case KindRejectAlways:
		d = config.PermissionReject
	default:
		return nil
	}
	return &store.AlwaysRule{Kind: ap.ToolCall.Kind, Title: ap.ToolCall.Title, Decision: d, ApprovalID: ap.ID}
}
