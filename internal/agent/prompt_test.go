package agent

import (
	"strings"
	"testing"

	"github.com/subagentd/subagentd/internal/model/scripted"
	"github.com/subagentd/subagentd/internal/sessionlog"
)

func TestPersona_S1_7_Interpolation(t *testing.T) {
	t.Parallel()
	vars := map[string]func() (string, bool){
		"name":    func() (string, bool) { return "Ada", true },
		"cwd_2":   func() (string, bool) { return "/srv", true },
		"nested":  func() (string, bool) { return "{{name}}", true },
		"missing": func() (string, bool) { return "", false },
	}
	for _, tc := range []struct {
		name, tmpl, want, err string
	}{
		{"replaces registered variables", "I am {{name}} in {{cwd_2}}.", "I am Ada in /srv.", ""},
		{"no references is literal", "plain { text } here", "plain { text } here", ""},
		{"empty template", "", "", ""},
		{"{{}} is malformed", "a {{}} b", "", `malformed variable reference "{{}}"`},
		{"name must start with a letter", "{{1a}}", "", `malformed variable reference "{{1a}}"`},
		{"upper case is malformed", "{{Name}}", "", `malformed variable reference "{{Name}}"`},
		{"spaces are malformed", "{{ name }}", "", `malformed variable reference "{{ name }}"`},
		{"braces inside are malformed", "{{{name}}}", "", `malformed variable reference "{{{name}}"`},
		{"a later }} makes an invalid group malformed", "x {{ y }} {{name}}", "", `malformed variable reference "{{ y }}"`},
		{"a {{ followed later by }} across text is malformed", "{{name} and {{x}}", "", `malformed variable reference "{{name} and {{x}}"`},
		{"a lone {{ with no later }} is literal", "cost {{ unbounded", "cost {{ unbounded", ""},
		{"a lone {{ after a reference is literal", "{{name}} {{", "Ada {{", ""},
		{"a }} before any {{ is literal", "}} {{name}}", "}} Ada", ""},
		{"unregistered name lists the registered ones", "{{nobody}}", "", `unknown variable "nobody"; registered variables: cwd_2, missing, name, nested`},
		{"registered but undefined now", "{{missing}}", "", `variable "missing" has no value`},
		{"values are not re-scanned", "{{nested}}!", "{{name}}!", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := interpolate(tc.tmpl, vars)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "persona template: ") {
					t.Fatalf("err %v, want containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := interpolate("{{x}}", nil); err == nil || !strings.Contains(err.Error(), "registered variables: (none)") {
		t.Errorf("no variables: %v", err)
	}
}

// systemOf runs one turn and returns the system text the model saw.
func systemOf(t *testing.T, cfg Config) string {
	t.Helper()
	m := scripted.New(scripted.Step{Text: "ok"})
	cfg.Model = m
	a := newAgent(t, nil, cfg)
	followup(t, a, "hi")
	waitIdle(t, a)
	return m.Requests()[0].System
}

func ptr(s string) *string { return &s }

func TestPersona_S1_7_SectionRules(t *testing.T) {
	t.Parallel()
	sections := []Section{{Name: "late", Order: 200, Text: "LATE"}, {Name: "early", Order: 10, Text: "EARLY"}, {Name: "blank", Order: 5, Text: "  "}}
	vars := map[string]func() (string, bool){"who": func() (string, bool) { return "Bob", true }}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"omitted inherits the deployment persona", Config{DeploymentPersona: "DEPLOY {{who}}"}, "DEPLOY Bob\n\nEARLY\n\nLATE"},
		{"own persona shadows the deployment one", Config{DeploymentPersona: "DEPLOY", Persona: ptr("CHILD {{who}}")}, "CHILD Bob\n\nEARLY\n\nLATE"},
		{"empty persona means none", Config{DeploymentPersona: "DEPLOY", Persona: ptr("")}, "EARLY\n\nLATE"},
		{"persona shadows a configured section of its name", Config{Persona: ptr("P"),
			Sections: []Section{{Name: PersonaSection, Order: 0, Text: "OLD"}}}, "P\n\nEARLY\n\nLATE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Sections = append(cfg.Sections, sections...)
			cfg.Vars = vars
			if got := systemOf(t, cfg); got != tc.want {
				t.Errorf("system %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPersona_S1_7_ErrorsSurfaceAtPromptAssembly(t *testing.T) {
	t.Parallel()
	m := scripted.New()
	// New succeeds: the template is only interpolated when a request is built.
	a := newAgent(t, nil, Config{Model: m, Persona: ptr("hello {{ghost}}")})
	followup(t, a, "hi")
	waitIdle(t, a)
	te := ofType[sessionlog.TurnEndData](t, a.Events(), sessionlog.EventTurnEnd)
	if len(te) != 1 || te[0].Reason.Kind != sessionlog.ReasonError || !strings.Contains(te[0].Reason.Message, `unknown variable "ghost"`) {
		t.Fatalf("turn/end %+v", te)
	}
	if len(m.Requests()) != 0 {
		t.Error("the model was called despite the persona error")
	}
}
