package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrInvalid is returned (wrapped) for data a store refuses to keep: an
// event without a type, JSON that does not parse, or an oversized payload.
// Nothing is written when it is returned.
var ErrInvalid = errors.New("invalid data")

// Bounds every store enforces, so that one bad writer cannot bloat a log
// that readers replay.
const (
	// MaxEventBytes bounds the JSON of one event's data.
	MaxEventBytes = 1 << 20
	// MaxTypeLen bounds an event type name.
	MaxTypeLen = 128
)

// CheckEvents validates evs before an append: every event has a type of at
// most MaxTypeLen bytes of UTF-8, and data that is empty (stored as null)
// or valid JSON of at most MaxEventBytes. Returns an error wrapping
// ErrInvalid that names the first bad event.
func CheckEvents(evs []NewEvent) error {
	for i, e := range evs {
		switch {
		case e.Type == "" || len(e.Type) > MaxTypeLen || !utf8.ValidString(e.Type):
			return fmt.Errorf("event %d: type must be 1–%d bytes of UTF-8: %w", i, MaxTypeLen, ErrInvalid)
		case len(e.Data) > MaxEventBytes:
			return fmt.Errorf("event %d (%s): data is %d bytes, more than %d: %w", i, e.Type, len(e.Data), MaxEventBytes, ErrInvalid)
		case len(e.Data) > 0 && !json.Valid(e.Data):
			return fmt.Errorf("event %d (%s): data is not valid JSON: %w", i, e.Type, ErrInvalid)
		}
	}
	return nil
}
