package governance_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/config"
	"github.com/subagentd/subagentd/internal/governance"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestCreatePolicy_Validates(t *testing.T) {
	t.Parallel()
	a, b := setup(t, true)
	long := strings.Repeat("a", governance.MaxTitlePattern+1)
	for _, tc := range []struct {
		name  string
		p     governance.PolicyParams
		field string
	}{
		{"no mode", governance.PolicyParams{}, "approvals.mode"},
		{"bad mode", governance.PolicyParams{Mode: "maybe"}, "approvals.mode"},
		{"bad kind", governance.PolicyParams{Mode: "ask", Rules: []store.PolicyRule{{Kind: "write", Decision: "ask"}}}, "approvals.rules[0].kind"},
		{"bad decision", governance.PolicyParams{Mode: "ask", Rules: []store.PolicyRule{{Kind: "edit", Decision: "yes"}}}, "approvals.rules[0].decision"},
		{"bad pattern", governance.PolicyParams{Mode: "ask", Rules: []store.PolicyRule{{Kind: "edit", TitlePattern: "(", Decision: "ask"}}}, "approvals.rules[0].titlePattern"},
		{"long pattern", governance.PolicyParams{Mode: "ask", Rules: []store.PolicyRule{{Kind: "edit", TitlePattern: long, Decision: "ask"}}}, "approvals.rules[0].titlePattern"},
		{"invalid UTF-8 pattern", governance.PolicyParams{Mode: "ask", Rules: []store.PolicyRule{{Kind: "edit", TitlePattern: "\xff", Decision: "ask"}}}, "approvals.rules[0].titlePattern"},
		{"too many rules", governance.PolicyParams{Mode: "ask", Rules: make([]store.PolicyRule, governance.MaxPolicyRules+1)}, "approvals.rules"},
		{"bad timeout", governance.PolicyParams{Mode: "ask", Timeout: "soon"}, "approvals.timeout"},
		{"zero timeout", governance.PolicyParams{Mode: "ask", Timeout: "0s"}, "approvals.timeout"},
		{"timeout too long", governance.PolicyParams{Mode: "ask", Timeout: "169h"}, "approvals.timeout"},
		{"onTimeout without timeout", governance.PolicyParams{Mode: "ask", OnTimeout: "cancel"}, "approvals.onTimeout"},
		{"bad onTimeout", governance.PolicyParams{Mode: "ask", Timeout: "1m", OnTimeout: "allow"}, "approvals.onTimeout"},
	} {
		err := a.CreatePolicy(b.ctx, "root", tc.p)
		var se *subagent.Error
		if code(err) != subagent.EInvalidRequest || !errors.As(err, &se) || se.Fields[tc.field] == "" {
			t.Errorf("%s: %v, want INVALID_REQUEST naming %s", tc.name, err, tc.field)
		}
	}
	if _, err := b.st.TreePolicy(b.ctx, "root"); err == nil {
		t.Fatal("a refused policy was stored")
	}
	if err := a.CreatePolicy(b.ctx, "root", governance.PolicyParams{Mode: "ask", Timeout: "90s",
		Rules: []store.PolicyRule{{Kind: governance.KindDelegate, Decision: "ask"}}}); err != nil {
		t.Fatal(err)
	}
	tp, err := b.st.TreePolicy(b.ctx, "root")
	if err != nil || tp.Timeout != 90*time.Second || tp.OnTimeout != config.OnTimeoutReject || len(tp.Rules) != 1 {
		t.Fatalf("stored %+v, %v; want the 90s timeout answered by reject", tp, err)
	}
}

func TestPolicy_TheTreeNarrowsTheProvider(t *testing.T) {
	t.Parallel()
	a, b := setup(t, true)
	provider := config.ProviderConfig{Name: "acp", Permission: config.PermissionAllow, ApprovalTimeout: time.Hour, OnTimeout: config.OnTimeoutCancel,
		Rules: []config.PermissionRule{{Kind: "delete", Decision: config.PermissionReject}, {Kind: "execute", Decision: config.PermissionAsk}}}
	verdict := func(kind, title string) governance.Verdict {
		t.Helper()
		v, err := a.Policy(b.ctx, governance.Query{SessionID: "child", Provider: provider, Kind: kind, Title: title})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := verdict("edit", "Write a.go"); v.Decision != config.PermissionAllow {
		t.Fatalf("without a tree policy: %+v, want the provider's allow", v)
	}
	if err := a.CreatePolicy(b.ctx, "root", governance.PolicyParams{Mode: "ask", Timeout: "1m", Rules: []store.PolicyRule{
		{Kind: "read", Decision: "allow"}, {Kind: "execute", Decision: "allow"}, {Kind: "edit", TitlePattern: `\.md$`, Decision: "reject"},
	}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ kind, title, want string }{
		{"edit", "Write a.go", config.PermissionAsk},        // provider allow, tree mode ask: asks
		{"read", "Read a.go", config.PermissionAllow},       // both allow
		{"execute", "ls", config.PermissionAsk},             // tree allow cannot widen the provider's ask
		{"delete", "rm a.go", config.PermissionReject},      // the provider's reject stands
		{"edit", "Write notes.md", config.PermissionReject}, // the tree's rule narrows to reject
		{"", "untitled", config.PermissionAsk},              // no kind counts as other
	} {
		if v := verdict(tc.kind, tc.title); v.Decision != tc.want {
			t.Errorf("%s %q: %s, want %s", tc.kind, tc.title, v.Decision, tc.want)
		}
	}
	if v := verdict("edit", "Write a.go"); v.Timeout != time.Minute || v.OnTimeout != config.OnTimeoutReject {
		t.Fatalf("timeout %s/%s, want the tree's shorter 1m answered by reject", v.Timeout, v.OnTimeout)
	}
	provider.ApprovalTimeout = time.Second
	if v := verdict("edit", "Write a.go"); v.Timeout != time.Second || v.OnTimeout != config.OnTimeoutCancel {
		t.Fatalf("timeout %s/%s, want the provider's shorter 1s answered by cancel", v.Timeout, v.OnTimeout)
	}
	if _, err := a.Policy(b.ctx, governance.Query{SessionID: "nope", Provider: provider, Kind: "edit"}); err == nil {
		t.Fatal("the policy of an unknown session was answered")
	}
}

func TestDecide_AlwaysAnswersTheTreesNextRequest(t *testing.T) {
	t.Parallel()
	a, b := setup(t, false)
	provider := config.ProviderConfig{Name: "acp", Permission: config.PermissionAsk,
		Rules: []config.PermissionRule{{Kind: "delete", TitlePattern: regexp.MustCompile("."), Decision: config.PermissionReject}}}
	verdict := func(title string) string {
		t.Helper()
		v, err := a.Policy(b.ctx, governance.Query{SessionID: "child", Provider: provider, Kind: "edit", Title: title})
		if err != nil {
			t.Fatal(err)
		}
		return v.Decision
	}
	decide := func(d governance.Decision) {
		t.Helper()
		ap, err := a.Open(b.ctx, ask(0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Decide(b.ctx, ap.ID, d); err != nil {
			t.Fatal(err)
		}
	}
	decide(governance.Decision{Outcome: "allow", Scope: "once"})
	if got := verdict("Modify config.json"); got != config.PermissionAsk {
		t.Fatalf("after a once decision: %s, want ask", got)
	}
	decide(governance.Decision{Outcome: "allow", Scope: "always"})
	if got := verdict("Modify config.json"); got != config.PermissionAllow {
		t.Fatalf("after an always decision: %s, want allow", got)
	}
	if got := verdict("Modify other.json"); got != config.PermissionAsk {
		t.Fatalf("another title: %s, want ask", got)
	}
	tp, err := b.st.TreePolicy(b.ctx, "root")
	if err != nil || len(tp.Always) != 1 || tp.Mode != "" || tp.Always[0].Kind != "edit" {
		t.Fatalf("tree policy %+v, %v; want one always rule in a policy without a mode", tp, err)
	}
}

// Delegations are asked about only by the tree's delegate rules: neither
// the tree's mode nor a provider's policy covers them.
func TestPolicy_DelegationsFollowDelegateRulesOnly(t *testing.T) {
	t.Parallel()
	a, b := setup(t, true)
	verdict := func() string {
		t.Helper()
		v, err := a.Policy(b.ctx, governance.Query{SessionID: "child", Kind: governance.KindDelegate, Title: "spawn: look"})
		if err != nil {
			t.Fatal(err)
		}
		return v.Decision
	}
	if got := verdict(); got != config.PermissionAllow {
		t.Fatalf("without a tree policy: %s", got)
	}
	if err := a.CreatePolicy(b.ctx, "root", governance.PolicyParams{Mode: "reject",
		Rules: []store.PolicyRule{{Kind: governance.KindDelegate, TitlePattern: "^fork: ", Decision: "ask"}}}); err != nil {
		t.Fatal(err)
	}
	if got := verdict(); got != config.PermissionAllow {
		t.Fatalf("no delegate rule matching, mode reject: %s, want allow", got)
	}
	v, err := a.Policy(b.ctx, governance.Query{SessionID: "child", Kind: governance.KindDelegate, Title: "fork: look"})
	if err != nil || v.Decision != config.PermissionAsk {
		t.Fatalf("the delegate rule: %+v, %v; want ask", v, err)
	}
}

// An always rule matches the title as its approval stored it: a long
// title, cut there, is matched by its request's full title.
func TestPolicy_AlwaysMatchesALongTitleAsStored(t *testing.T) {
	t.Parallel()
	a, b := setup(t, false)
	long := strings.Repeat("é", governance.MaxTitle) // cut mid-way, on a rune boundary
	req := ask(0)
	req.ToolCall.Title = governance.Clean(long, governance.MaxTitle)
	ap, err := a.Open(b.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Decide(b.ctx, ap.ID, governance.Decision{Outcome: "allow", Scope: "always"}); err != nil {
		t.Fatal(err)
	}
	provider := config.ProviderConfig{Name: "acp", Permission: config.PermissionAsk}
	v, err := a.Policy(b.ctx, governance.Query{SessionID: "child", Provider: provider, Kind: "edit", Title: long})
	if err != nil || v.Decision != config.PermissionAllow {
		t.Fatalf("%+v, %v; want the always rule's allow", v, err)
	}
}
