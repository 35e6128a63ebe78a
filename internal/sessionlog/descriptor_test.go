package sessionlog

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/subagentd/subagentd/internal/memstore"
	"github.com/subagentd/subagentd/internal/store"
)

func TestParseDescriptor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		raw         string
		want        Descriptor
		unsupported bool
		corrupt     string
	}{
		{"one-shot", `{"version":2,"mode":"one-shot","provider":"spawn","label":"x"}`, Descriptor{Mode: ModeOneShot, Provider: "spawn", Label: "x"}, false, ""},
		{"version 2.0", `{"version":2.0,"mode":"one-shot","provider":"spawn"}`, Descriptor{Mode: ModeOneShot, Provider: "spawn"}, false, ""},
		{"continuable", `{"version":2,"mode":"continuable","provider":"spawn","label":"l","agentProvider":"a","agentModel":"m","persona":"p","toolFilter":{"allow":["r"],"deny":[]}}`,
			Descriptor{Mode: ModeContinuable, Provider: "spawn", Label: "l", AgentProvider: "a", AgentModel: "m", Persona: ptr("p"), ToolFilter: &ToolFilter{Allow: []string{"r"}, Deny: []string{}}}, false, ""},
		// Rule 1.
		{"array", `[]`, Descriptor{}, false, "payload must be an object"},
		{"null", `null`, Descriptor{}, false, "payload must be an object"},
		{"string", `"x"`, Descriptor{}, false, "payload must be an object"},
		// Rule 2 before rule 3.
		{"version missing", `{"mode":"one-shot"}`, Descriptor{}, false, "version must be a number"},
		{"version string", `{"version":"2"}`, Descriptor{}, false, "version must be a number"},
		// Rule 3: unsupported is not corrupt, even if the rest is nonsense.
		{"version 1", `{"version":1,"mode":"weird","extra":true}`, Descriptor{}, true, ""},
		{"version 3", `{"version":3}`, Descriptor{}, true, ""},
		// Rule 4.
		{"mode missing", `{"version":2,"provider":"spawn"}`, Descriptor{}, false, `mode must be "one-shot" or "continuable"`},
		{"mode unknown", `{"version":2,"mode":"both","provider":"spawn"}`, Descriptor{}, false, `mode must be "one-shot" or "continuable"`},
		// Rule 5 before rule 6.
		{"one-shot unknown field", `{"version":2,"mode":"one-shot","provider":1,"persona":"p"}`, Descriptor{}, false, `payload has unknown field "persona"`},
		{"continuable unknown field", `{"version":2,"mode":"continuable","provider":"s","label":"l","maxTokens":5}`, Descriptor{}, false, `payload has unknown field "maxTokens"`},
		// Rule 6.
		{"provider missing", `{"version":2,"mode":"one-shot"}`, Descriptor{}, false, "provider must be a string"},
		{"provider null", `{"version":2,"mode":"one-shot","provider":null}`, Descriptor{}, false, "provider must be a string"},
		// Rule 7.
		{"one-shot label not a string", `{"version":2,"mode":"one-shot","provider":"s","label":3}`, Descriptor{}, false, "label must be a string"},
		{"continuable label required", `{"version":2,"mode":"continuable","provider":"s"}`, Descriptor{}, false, "label must be a string"},
		{"agentModel not a string", `{"version":2,"mode":"continuable","provider":"s","label":"l","agentModel":false}`, Descriptor{}, false, "agentModel must be a string"},
		{"persona null", `{"version":2,"mode":"continuable","provider":"s","label":"l","persona":null}`, Descriptor{}, false, "persona must be a string"},
		{"toolFilter not an object", `{"version":2,"mode":"continuable","provider":"s","label":"l","toolFilter":[]}`, Descriptor{}, false, "toolFilter must be an object"},
		{"toolFilter unknown key", `{"version":2,"mode":"continuable","provider":"s","label":"l","toolFilter":{"allow":[],"only":[]}}`, Descriptor{}, false, `toolFilter has unknown field "only"`},
		{"toolFilter list of numbers", `{"version":2,"mode":"continuable","provider":"s","label":"l","toolFilter":{"deny":[1]}}`, Descriptor{}, false, "toolFilter.deny must be an array of strings"},
		{"toolFilter empty", `{"version":2,"mode":"continuable","provider":"s","label":"l","toolFilter":{}}`, Descriptor{}, false, "toolFilter must have allow or deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok, err := ParseDescriptor(json.RawMessage(tt.raw))
			switch {
			case tt.corrupt != "":
				if !errors.Is(err, ErrCorruptDescriptor) || !strings.HasSuffix(err.Error(), tt.corrupt) || ok {
					t.Errorf("got %v, %v; want corrupt %q", ok, err, tt.corrupt)
				}
			case tt.unsupported:
				if ok || err != nil {
					t.Errorf("got %v, %v; want unsupported", ok, err)
				}
			default:
				if !ok || err != nil || !reflect.DeepEqual(got, tt.want) {
					t.Errorf("got %+v, %v, %v; want %+v", got, ok, err, tt.want)
				}
			}
		})
	}
}

// descEvent returns a subagent/descriptor event.
func descEvent(seq int64, payload string) store.Event {
	return store.Event{Seq: seq, Type: EventDescriptor, Data: json.RawMessage(payload)}
}

func other(seq int64) store.Event {
	return store.Event{Seq: seq, Type: "turn/start", Data: json.RawMessage(`{"turn":1}`)}
}

const (
	ancestor   = `{"version":2,"mode":"continuable","provider":"spawn","label":"ancestor"}`
	own        = `{"version":2,"mode":"continuable","provider":"fork","label":"own"}`
	ownOneShot = `{"version":2,"mode":"one-shot","provider":"fork"}`
	second     = `{"version":2,"mode":"continuable","provider":"fork","label":"second"}`
)

// resumeOf is ResumeDescriptor over a session whose log is evs.
func resumeOf(t *testing.T, seedLength int, evs ...store.Event) (Descriptor, bool, error) {
	t.Helper()
	st := memstore.New()
	sess := store.Session{ID: "c", SeedLength: seedLength, CreatedAt: time.Now()}
	if err := st.CreateSession(t.Context(), sess); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if _, err := st.AppendEvents(t.Context(), sess.ID, store.NewEvent{Type: e.Type, Data: e.Data}); err != nil {
			t.Fatal(err)
		}
	}
	return ResumeDescriptor(t.Context(), st, sess)
}

func TestResumeDescriptor_FirstInOwnSuffix(t *testing.T) {
	t.Parallel()
	endSeed := store.Event{Seq: 2, Type: "session/end-seed", Data: json.RawMessage(`{}`)}
	log := []store.Event{descEvent(0, ancestor), other(1), endSeed, descEvent(3, own), descEvent(4, second)}
	d, ok, err := resumeOf(t, 3, log...)
	if !ok || err != nil || d.Label != "own" || d.Provider != "fork" {
		t.Errorf("got %+v, %v, %v; want the child's own first descriptor", d, ok, err)
	}
	// A fork child that died before its own descriptor cannot resume under
	// its ancestor's.
	if _, ok, err := resumeOf(t, 2, log[:3]...); ok || err != nil {
		t.Errorf("got %v, %v; want none", ok, err)
	}
	// The first one decides, even when it is corrupt or of another version.
	if _, _, err := resumeOf(t, 0, descEvent(0, `{"version":2}`), descEvent(1, own)); !errors.Is(err, ErrCorruptDescriptor) {
		t.Errorf("corrupt first descriptor: %v", err)
	}
	if _, ok, err := resumeOf(t, 0, descEvent(0, `{"version":1}`), descEvent(1, own)); ok || err != nil {
		t.Errorf("unsupported first descriptor: %v, %v", ok, err)
	}
}

func TestResume_R7_ProviderFromDescriptor(t *testing.T) {
	t.Parallel()
	// Resume needs no registered provider: the epoch's edges carry the name
	// the descriptor recorded.
	d, ok, err := resumeOf(t, 0, descEvent(0, own))
	if !ok || err != nil || d.Provider != "fork" || d.Mode != ModeContinuable {
		t.Errorf("got %+v, %v, %v", d, ok, err)
	}
}

func TestIdentityDescriptor_LastWinsNullOnInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		log  []store.Event
		want *Identity
	}{
		{"none", []store.Event{other(0)}, nil},
		{"ancestor identity until own", []store.Event{descEvent(0, ancestor), other(1)}, &Identity{Descriptor: Descriptor{Mode: ModeContinuable, Provider: "spawn", Label: "ancestor"}, Seq: 0}},
		{"last wins", []store.Event{descEvent(0, ancestor), descEvent(2, ownOneShot)}, &Identity{Descriptor: Descriptor{Mode: ModeOneShot, Provider: "fork"}, Seq: 2}},
		{"corrupt resets", []store.Event{descEvent(0, own), descEvent(1, `{"version":2,"mode":"one-shot"}`)}, nil},
		{"unsupported resets", []store.Event{descEvent(0, own), descEvent(1, `{"version":9}`)}, nil},
		{"valid after invalid", []store.Event{descEvent(0, `[]`), descEvent(5, second)}, &Identity{Descriptor: Descriptor{Mode: ModeContinuable, Provider: "fork", Label: "second"}, Seq: 5}},
	}
	for _, tt := range tests {
		if got := IdentityDescriptor(tt.log); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
