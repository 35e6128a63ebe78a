package agent

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Section is one system-prompt section. Sections render in ascending Order
// (ties keep their given order); empty sections are dropped.
type Section struct {
	Name  string
	Order float64
	Text  string
}

// Well-known section names and orders.
const (
	// PersonaSection holds the (interpolated) persona; it shadows a
	// Config.Sections entry of the same name (docs/seam.md §9).
	PersonaSection = "deployment:persona"
	// StructuredSection tells the model to finish with structured_output
	// (docs/seam.md §9); it shadows a Config.Sections entry of the same name.
	StructuredSection      = "tool:structured_output"
	personaOrder           = 0
	structuredSectionOrder = 190
)

// varName is the grammar of a prompt variable name (docs/seam.md §9).
var varName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// interpolate replaces each {{name}} in tmpl by the value of vars[name]
// (docs/seam.md §9): a reference is a complete {{…}} group without braces
// inside whose name matches ^[a-z][a-z0-9_]*$; a {{ with no later }} is
// literal text; any other {{ … }} is malformed. Unknown names and variables
// without a value for this assembly are errors. Values are not re-scanned.
func interpolate(tmpl string, vars map[string]func() (string, bool)) (string, error) {
	var sb strings.Builder
	rest := tmpl
	for {
		open := strings.Index(rest, "{{")
		if open < 0 {
			sb.WriteString(rest)
			return sb.String(), nil
		}
		end := strings.Index(rest[open+2:], "}}")
		if end < 0 {
			sb.WriteString(rest)
			return sb.String(), nil
		}
		name := rest[open+2 : open+2+end]
		group := rest[open : open+4+end]
		if !varName.MatchString(name) {
			return "", fmt.Errorf("persona template: malformed variable reference %q", group)
		}
		get, ok := vars[name]
		if !ok {
			return "", fmt.Errorf("persona template: unknown variable %q; registered variables: %s", name, registered(vars))
		}
		val, ok := get()
		if !ok {
			return "", fmt.Errorf("persona template: variable %q has no value", name)
		}
		sb.WriteString(rest[:open])
		sb.WriteString(val)
		rest = rest[open+4+end:]
	}
}

func registered(vars map[string]func() (string, bool)) string {
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	if len(names) == 0 {
		return "(none)"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// systemPrompt assembles the system text for one model request: the
// configured sections, the persona section (Persona, else the deployment
// persona, interpolated now) and, with an output schema, the structured
// output instruction. It returns the persona's interpolation error.
func (a *Agent) systemPrompt() (string, error) {
	persona := a.cfg.DeploymentPersona
	if a.cfg.Persona != nil {
		persona = *a.cfg.Persona
	}
	persona, err := interpolate(persona, a.cfg.Vars)
	if err != nil {
		return "", err
	}
	own := []Section{{Name: PersonaSection, Order: personaOrder, Text: persona}}
	if a.cfg.OutputSchema != nil {
		own = append(own, Section{Name: StructuredSection, Order: structuredSectionOrder, Text: structuredInstruction})
	}
	sections := slices.DeleteFunc(slices.Clone(a.cfg.Sections), func(s Section) bool {
		return slices.ContainsFunc(own, func(o Section) bool { return o.Name == s.Name })
	})
	sections = append(sections, own...)
	slices.SortStableFunc(sections, func(x, y Section) int {
		switch {
		case x.Order < y.Order:
			return -1
		case x.Order > y.Order:
			return 1
		}
		return 0
	})
	texts := make([]string, 0, len(sections))
	for _, s := range sections {
		if strings.TrimSpace(s.Text) != "" {
			texts = append(texts, s.Text)
		}
	}
	return strings.Join(texts, "\n\n"), nil
}
