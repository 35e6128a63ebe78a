package delegate

import (
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/subagent"
)

func TestHeadline_5_1_Constants(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		subagent.StopAborted:   "subagent run was cancelled",
		subagent.StopError:     "subagent run failed",
		subagent.StopMaxTokens: "subagent run hit its token limit before finishing",
		subagent.StopRefusal:   "subagent declined the task",
		"timeout":              "subagent run ended abnormally (timeout)",
		"":                     "subagent run ended abnormally ()",
	} {
		if got := Headline(reason); got != want {
			t.Errorf("Headline(%q) = %q, want %q", reason, got, want)
		}
	}
}

func TestFailureText_5_1_DiagnosticAndPartialOutput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  subagent.Result
		want string
	}{
		{"headline only", subagent.Result{StopReason: subagent.StopAborted, Output: []model.Block{}},
			"subagent run was cancelled"},
		{"diagnostic", subagent.Result{StopReason: subagent.StopError, Diagnostic: "model request failed: 500"},
			"subagent run failed\nDiagnostic: model request failed: 500"},
		{"partial output", subagent.Result{StopReason: subagent.StopMaxTokens, Output: []model.Block{model.TextBlock("half an ")}},
			"subagent run hit its token limit before finishing\nPartial output before the run ended:\nhalf an "},
		{"both", subagent.Result{StopReason: "weird", Diagnostic: "d", Output: []model.Block{model.TextBlock("a"), model.TextBlock("b")}},
			"subagent run ended abnormally (weird)\nDiagnostic: d\nPartial output before the run ended:\nab"},
		{"textless output adds nothing", subagent.Result{StopReason: subagent.StopRefusal,
			Output: []model.Block{{Type: "image", Raw: []byte(`{"type":"image"}`)}}},
			"subagent declined the task"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := FailureText(tt.res); got != tt.want {
				t.Errorf("FailureText = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestToolDescription_5_1_WordingFromInheritsParentContext(t *testing.T) {
	t.Parallel()
	fresh := &fakeProvider{name: "remote"}
	forked := &fakeProvider{name: "forky", inherits: true}

	d, p := toolDescription(fresh, false)
	if !contains(d, "does not see this conversation", "standalone prompt", "waits and returns the result", "fake provider remote") ||
		!contains(p, "include everything it needs") {
		t.Errorf("fresh wording:\n%s\n%s", d, p)
	}
	d, p = toolDescription(forked, false)
	if !contains(d, "inherits all completed turns", "not the current, in-flight turn") || !contains(p, "already sees the completed turns") {
		t.Errorf("fork wording:\n%s\n%s", d, p)
	}
	d, _ = toolDescription(fresh, true)
	if !contains(d, "send_message", "runs in the background by default") || strings.Contains(d, "job_output") || strings.Contains(d, "job_kill") {
		t.Errorf("continuable wording:\n%s", d)
	}
	if !strings.Contains(backgroundParam, "Defaults to true") {
		t.Errorf("run_in_background description %q lacks %q", backgroundParam, "Defaults to true")
	}
}
