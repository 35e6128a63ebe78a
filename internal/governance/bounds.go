package governance

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/subagentd/subagentd/internal/store"
)

// Approver answers tool calls by policy and sends those it asks about to a
// person: ACP agents' permission requests and in-process agents'
// delegations alike. *Approvals implements it.
type Approver interface {
	// Policy answers a tool call: allow, reject or ask.
	Policy(ctx context.Context, q Query) (Verdict, error)
	// Open creates the pending approval of ask and announces it.
	Open(ctx context.Context, ask Ask) (store.Approval, error)
	// Await waits until the approval is closed — decided, expired, or
	// cancelled once ctx ends — and returns it closed.
	Await(ctx context.Context, ap store.Approval, onTimeout string) (store.Approval, error)
}

var _ Approver = (*Approvals)(nil)

// Bounds of what an agent's request may put in an approval: longer titles
// are cut, and locations or input beyond them are left out.
const (
	MaxTitle      = 1024
	MaxOptions    = 16
	MaxOptionText = 256
	MaxLocations  = 64
	MaxRawInput   = 64 << 10
)

// Clean makes s storable text of at most n bytes: valid UTF-8 (the JSON
// decoder already replaced invalid bytes), without NUL characters.
func Clean(s string, n int) string {
	s = strings.ReplaceAll(s, "\x00", "")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// BoundedJSON encodes v, nil when it is larger than MaxRawInput or holds a
// NUL character (which jsonb refuses).
func BoundedJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil || len(b) > MaxRawInput || bytes.Contains(b, []byte(`\u0000`)) {
		return nil
	}
	return b
}
