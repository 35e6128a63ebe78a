package subagent

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/sessionlog"
)

// The descriptor of a child is a session-log payload (sessionlog.Descriptor);
// the seam speaks of it in its requests and checks it before it is stored.
type (
	Descriptor = sessionlog.Descriptor
	ToolFilter = sessionlog.ToolFilter
)

// Descriptor modes, which are also the modes of a child's session header.
const (
	ModeOneShot     = sessionlog.ModeOneShot
	ModeContinuable = sessionlog.ModeContinuable
)

// errNotLossless is the creation-time failure of a descriptor that JSON
// would alter (docs/seam.md §10 snapshot rules).
func errNotLossless() *Error {
	return Errorf(EInvalidRequest, "subagent descriptor is not losslessly JSON-serializable")
}

// SnapshotDescriptor checks d and returns its subagent/descriptor payload
// (sessionlog.EncodeDescriptor). Creation must call it before any child
// work, so that a descriptor that cannot be stored fails the start.
//
// Returns EInvalidRequest for an unknown mode, a one-shot descriptor with
// continuable fields, a tool filter with neither list, or strings that are
// not valid UTF-8 ("subagent descriptor is not losslessly
// JSON-serializable").
func SnapshotDescriptor(d Descriptor) (json.RawMessage, error) {
	switch d.Mode {
	case ModeOneShot:
		if d.AgentProvider != "" || d.AgentModel != "" || d.Persona != nil || d.ToolFilter != nil {
			return nil, Errorf(EInvalidRequest, "a one-shot descriptor carries only provider and label")
		}
	case ModeContinuable:
		if f := d.ToolFilter; f != nil {
			if err := checkToolFilter(f); err != nil {
				return nil, err
			}
		}
	default:
		return nil, Errorf(EInvalidRequest, "subagent descriptor mode must be %q or %q", ModeOneShot, ModeContinuable)
	}
	strs := []string{d.Provider, d.Label, d.AgentProvider, d.AgentModel}
	if d.Persona != nil {
		strs = append(strs, *d.Persona)
	}
	if d.ToolFilter != nil {
		strs = append(append(strs, d.ToolFilter.Allow...), d.ToolFilter.Deny...)
	}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return nil, errNotLossless()
		}
	}
	data, err := sessionlog.EncodeDescriptor(d)
	if err != nil {
		return nil, errNotLossless()
	}
	return data, nil
}

// checkToolFilter enforces the tool-filter shape (docs/seam.md §9): at least
// one list. Returns EInvalidRequest.
func checkToolFilter(f *ToolFilter) error {
	if f.Allow == nil && f.Deny == nil {
		return &Error{Code: EInvalidRequest, Message: "toolFilter needs allow or deny",
			Fields: map[string]string{"toolFilter": "needs allow or deny"}}
	}
	return nil
}
