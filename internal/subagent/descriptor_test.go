package subagent

import (
	"reflect"
	"testing"

	"github.com/subagentd/subagentd/internal/sessionlog"
)

func TestSnapshotDescriptor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    Descriptor
		want string
		code string
	}{
		{"one-shot", Descriptor{Mode: ModeOneShot, Provider: "spawn"}, `{"version":2,"mode":"one-shot","provider":"spawn"}`, ""},
		{"one-shot with label", Descriptor{Mode: ModeOneShot, Provider: "spawn", Label: "review"}, `{"version":2,"mode":"one-shot","provider":"spawn","label":"review"}`, ""},
		{"continuable minimal", Descriptor{Mode: ModeContinuable, Provider: "fork", Label: "l"}, `{"version":2,"mode":"continuable","provider":"fork","label":"l"}`, ""},
		{"continuable full", Descriptor{Mode: ModeContinuable, Provider: "spawn", Label: "l", AgentProvider: "local", AgentModel: "m",
			Persona: ptr(""), ToolFilter: &ToolFilter{Allow: []string{}}},
			`{"version":2,"mode":"continuable","provider":"spawn","label":"l","agentProvider":"local","agentModel":"m","persona":"","toolFilter":{"allow":[]}}`, ""},
		{"deny only", Descriptor{Mode: ModeContinuable, Provider: "spawn", Label: "l", ToolFilter: &ToolFilter{Deny: []string{"a<b"}}},
			`{"version":2,"mode":"continuable","provider":"spawn","label":"l","toolFilter":{"deny":["a\u003cb"]}}`, ""},
		{"one-shot with continuable fields", Descriptor{Mode: ModeOneShot, Provider: "spawn", AgentModel: "m"}, "", EInvalidRequest},
		{"unknown mode", Descriptor{Mode: "other", Provider: "spawn"}, "", EInvalidRequest},
		{"empty tool filter", Descriptor{Mode: ModeContinuable, Provider: "spawn", Label: "l", ToolFilter: &ToolFilter{}}, "", EInvalidRequest},
		{"invalid UTF-8", Descriptor{Mode: ModeContinuable, Provider: "spawn", Label: "l", Persona: ptr("\xc3")}, "", EInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := SnapshotDescriptor(tt.d)
			if tt.code != "" {
				if ErrorCode(err) != tt.code {
					t.Fatalf("err = %v, want %s", err, tt.code)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %s, %v\nwant %s", got, err, tt.want)
			}
			// Every snapshot parses back to itself.
			back, ok, err := sessionlog.ParseDescriptor(got)
			if !ok || err != nil || !reflect.DeepEqual(back, tt.d) {
				t.Errorf("parse back = %+v, %v, %v", back, ok, err)
			}
		})
	}
	if _, err := SnapshotDescriptor(Descriptor{Mode: ModeOneShot, Provider: "x", Label: "\xff"}); ErrorMessage(err) != "subagent descriptor is not losslessly JSON-serializable" {
		t.Errorf("lossless message = %q", ErrorMessage(err))
	}
}
