package subagent

// DescriptorVersion is the current subagent/descriptor version (seam-spec §1.8).
const DescriptorVersion = 2

// Descriptor modes.
const (
	ModeOneShot     = "one-shot"
	ModeContinuable = "continuable"
)

// Descriptor is the subagent/descriptor event payload, version 2 (§1.8).
// Empty optional strings and a nil ToolFilter/Persona are absent.
type Descriptor struct {
	Mode          string
	Provider      string
	Label         string
	AgentProvider string
	AgentModel    string
	Persona       *string
	ToolFilter    *ToolFilter
}

// EventDescriptor is the session-log event type that carries a Descriptor.
const EventDescriptor = "subagent/descriptor"
