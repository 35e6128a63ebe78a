package sessionlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/subagentd/subagentd/internal/jsonstr"
	"github.com/subagentd/subagentd/internal/store"
)

// DescriptorVersion is the current subagent/descriptor version (docs/seam.md §10).
const DescriptorVersion = 2

// Descriptor modes, which are also the modes of a child's session header.
const (
	ModeOneShot     = "one-shot"
	ModeContinuable = "continuable"
)

// Descriptor is the subagent/descriptor event payload, version 2 (docs/seam.md §10):
// the identity a child was started with, which listing and resume read
// back. Empty optional strings and a nil ToolFilter/Persona are absent.
type Descriptor struct {
	Mode          string
	Provider      string
	Label         string
	AgentProvider string
	AgentModel    string
	Persona       *string
	ToolFilter    *ToolFilter
}

// ToolFilter scopes the global tools a child sees (docs/seam.md §9). A nil
// slice is an absent list; a non-nil empty Allow hides every global tool.
type ToolFilter struct {
	Allow []string
	Deny  []string
}

// EventDescriptor is the session-log event type that carries a Descriptor.
const EventDescriptor = "subagent/descriptor"

// ErrCorruptDescriptor wraps every error of ParseDescriptor: a payload of
// the current version that is malformed. Listing reports such a child as a
// "corrupt" diagnostic; resume refuses it.
var ErrCorruptDescriptor = errors.New("corrupt subagent descriptor")

// descriptorJSON is the persisted payload (docs/seam.md §10). Absent inputs
// are omitted, never written as null.
type descriptorJSON struct {
	Version       int             `json:"version"`
	Mode          string          `json:"mode"`
	Provider      string          `json:"provider"`
	Label         *string         `json:"label,omitempty"`
	AgentProvider string          `json:"agentProvider,omitempty"`
	AgentModel    string          `json:"agentModel,omitempty"`
	Persona       *string         `json:"persona,omitempty"`
	ToolFilter    *toolFilterJSON `json:"toolFilter,omitempty"`
}

// toolFilterJSON keeps an absent list (nil) apart from an empty one.
type toolFilterJSON struct {
	Allow *[]string `json:"allow,omitempty"`
	Deny  *[]string `json:"deny,omitempty"`
}

// descriptorKeys are the keys each mode allows.
var descriptorKeys = map[string][]string{
	ModeOneShot:     {"version", "mode", "provider", "label"},
	ModeContinuable: {"version", "mode", "provider", "label", "agentProvider", "agentModel", "persona", "toolFilter"},
}

// EncodeDescriptor returns the subagent/descriptor payload of d, version
// 2: a one-shot descriptor holds provider and, when non-empty, label; a
// continuable one always holds label plus the optional route, persona and
// tool filter. It encodes what it is given: the seam checks a descriptor
// (subagent.SnapshotDescriptor) before it is stored. Returns an error for
// an unknown mode or a payload that does not marshal.
func EncodeDescriptor(d Descriptor) (json.RawMessage, error) {
	p := descriptorJSON{Version: DescriptorVersion, Mode: d.Mode, Provider: d.Provider}
	switch d.Mode {
	case ModeOneShot:
		return appendOneShotDescriptor(make([]byte, 0, 96), d), nil
	case ModeContinuable:
		p.Label = &d.Label
		p.AgentProvider, p.AgentModel, p.Persona = d.AgentProvider, d.AgentModel, d.Persona
		if f := d.ToolFilter; f != nil {
			p.ToolFilter = &toolFilterJSON{}
			if f.Allow != nil {
				p.ToolFilter.Allow = &f.Allow
			}
			if f.Deny != nil {
				p.ToolFilter.Deny = &f.Deny
			}
		}
	default:
		return nil, fmt.Errorf("encode subagent descriptor: unknown mode %q", d.Mode)
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode subagent descriptor: %w", err)
	}
	return data, nil
}

// appendOneShotDescriptor appends what json.Marshal writes for the
// descriptorJSON of one-shot d, without reflection: every one-shot run
// encodes its descriptor twice (subagent.SnapshotDescriptor checks it at
// admission, then the provider stores it).
func appendOneShotDescriptor(b []byte, d Descriptor) []byte {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, DescriptorVersion, 10)
	b = append(b, `,"mode":`...)
	b = jsonstr.Append(b, ModeOneShot)
	b = append(b, `,"provider":`...)
	b = jsonstr.Append(b, d.Provider)
	b = appendOptString(b, "label", d.Label)
	return append(b, '}')
}

// ParseDescriptor reads a persisted subagent/descriptor payload with the
// rules of docs/seam.md §10, in order. supported is false, with no error,
// when the payload has another version (unclassifiable, not corrupt). A
// malformed payload of the current version returns an error wrapping
// ErrCorruptDescriptor.
func ParseDescriptor(raw json.RawMessage) (d Descriptor, supported bool, err error) {
	corrupt := func(format string, args ...any) (Descriptor, bool, error) {
		return Descriptor{}, false, fmt.Errorf("%w: %s", ErrCorruptDescriptor, fmt.Sprintf(format, args...))
	}
	var m map[string]json.RawMessage
	if !isJSONKind(raw, '{') || json.Unmarshal(raw, &m) != nil {
		return corrupt("payload must be an object")
	}
	var version float64
	if v, ok := m["version"]; !ok || !isJSONNumber(v) || json.Unmarshal(v, &version) != nil {
		return corrupt("version must be a number")
	}
	if version != DescriptorVersion {
		return Descriptor{}, false, nil
	}
	mode, _ := jsonString(m["mode"])
	allowed, ok := descriptorKeys[mode]
	if !ok {
		return corrupt("mode must be %q or %q", ModeOneShot, ModeContinuable)
	}
	keys := slices.Sorted(maps.Keys(m))
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return corrupt("payload has unknown field %q", k)
		}
	}
	d = Descriptor{Mode: mode}
	if d.Provider, ok = jsonString(m["provider"]); !ok {
		return corrupt("provider must be a string")
	}
	if raw, present := m["label"]; present || mode == ModeContinuable {
		if d.Label, ok = jsonString(raw); !ok {
			return corrupt("label must be a string")
		}
	}
	if mode == ModeOneShot {
		return d, true, nil
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"agentProvider", &d.AgentProvider}, {"agentModel", &d.AgentModel}} {
		if raw, present := m[f.key]; present {
			if *f.dst, ok = jsonString(raw); !ok {
				return corrupt("%s must be a string", f.key)
			}
		}
	}
	if raw, present := m["persona"]; present {
		persona, ok := jsonString(raw)
		if !ok {
			return corrupt("persona must be a string")
		}
		d.Persona = &persona
	}
	if raw, present := m["toolFilter"]; present {
		if d.ToolFilter, err = parseToolFilter(raw); err != nil {
			return corrupt("%v", err)
		}
	}
	return d, true, nil
}

// parseToolFilter reads a persisted tool filter: an object with only allow
// and deny, each an array of strings, at least one present.
func parseToolFilter(raw json.RawMessage) (*ToolFilter, error) {
	var m map[string]json.RawMessage
	if !isJSONKind(raw, '{') || json.Unmarshal(raw, &m) != nil {
		return nil, errors.New("toolFilter must be an object")
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "allow" && k != "deny" {
			return nil, fmt.Errorf("toolFilter has unknown field %q", k)
		}
	}
	f := &ToolFilter{}
	for _, l := range []struct {
		key string
		dst *[]string
	}{{"allow", &f.Allow}, {"deny", &f.Deny}} {
		raw, present := m[l.key]
		if !present {
			continue
		}
		var elems []json.RawMessage
		if !isJSONKind(raw, '[') || json.Unmarshal(raw, &elems) != nil {
			return nil, fmt.Errorf("toolFilter.%s must be an array of strings", l.key)
		}
		*l.dst = make([]string, 0, len(elems))
		for _, e := range elems {
			s, ok := jsonString(e)
			if !ok {
				return nil, fmt.Errorf("toolFilter.%s must be an array of strings", l.key)
			}
			*l.dst = append(*l.dst, s)
		}
	}
	if f.Allow == nil && f.Deny == nil {
		return nil, errors.New("toolFilter must have allow or deny")
	}
	return f, nil
}

// isJSONKind reports whether raw is a JSON value starting with delim ('{'
// or '[').
func isJSONKind(raw json.RawMessage, delim byte) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == delim
}

// isJSONNumber reports whether raw is a JSON number.
func isJSONNumber(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'))
}

// jsonString decodes raw when it is a JSON string (null is not).
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if !isJSONKind(raw, '"') || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// ResumeDescriptor is the resume fold, the authority for cold resume
// (docs/seam.md §10): the first subagent/descriptor in the own suffix of sess's log, the events
// with seq >= SeedLength, so that a fork child never resumes under an
// ancestor's descriptor. It reads the log only up to that event. found is
// false when the suffix has none or the first one has another version; err
// wraps ErrCorruptDescriptor when it is malformed, or is the store's. The
// caller decides whether its mode allows resuming.
func ResumeDescriptor(ctx context.Context, st store.Store, sess store.Session) (d Descriptor, found bool, err error) {
	for after := int64(sess.SeedLength) - 1; ; {
		page, err := st.Events(ctx, sess.ID, after, 100)
		if err != nil {
			return Descriptor{}, false, fmt.Errorf("read log of %s: %w", sess.ID, err)
		}
		if len(page) == 0 {
			return Descriptor{}, false, nil
		}
		for _, e := range page {
			if e.Type == EventDescriptor {
				return ParseDescriptor(e.Data)
			}
		}
		after = page[len(page)-1].Seq
	}
}

// Identity is a child's listing identity: the descriptor that the identity
// fold settled on and the seq of its event.
type Identity struct {
	Descriptor
	Seq int64
}

// IdentityDescriptor is the authority for listing (docs/seam.md §10): a
// last-wins fold over the whole log in which a malformed or unknown-version
// descriptor resets the identity. It returns nil (serialized as null) when
// the log ends without a valid descriptor; it never fails.
func IdentityDescriptor(events []store.Event) *Identity {
	var id *Identity
	for _, e := range events {
		if e.Type != EventDescriptor {
			continue
		}
		d, ok, err := ParseDescriptor(e.Data)
		if !ok || err != nil {
			id = nil
			continue
		}
		id = &Identity{Descriptor: d, Seq: e.Seq}
	}
	return id
}
