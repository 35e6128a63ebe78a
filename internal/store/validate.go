package store

import (
	"bytes"
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
// or valid JSON (taken on trust when Marshaled) of at most MaxEventBytes
// that passes CheckJSONText. Returns an error wrapping
// ErrInvalid that names the first bad event.
func CheckEvents(evs []NewEvent) error {
	for i, e := range evs {
		switch {
		case e.Type == "" || len(e.Type) > MaxTypeLen || !utf8.ValidString(e.Type):
			return fmt.Errorf("event %d: type must be 1–%d bytes of UTF-8: %w", i, MaxTypeLen, ErrInvalid)
		case len(e.Data) > MaxEventBytes:
			return fmt.Errorf("event %d (%s): data is %d bytes, more than %d: %w", i, e.Type, len(e.Data), MaxEventBytes, ErrInvalid)
		case len(e.Data) > 0 && !e.Marshaled && !json.Valid(e.Data):
			return fmt.Errorf("event %d (%s): data is not valid JSON: %w", i, e.Type, ErrInvalid)
		}
		if err := CheckJSONText(e.Data); err != nil {
			return fmt.Errorf("event %d (%s): %w", i, e.Type, err)
		}
	}
	return nil
}

// CheckJSONText refuses JSON text that Go accepts but Postgres does not
// store: a NUL character (raw or as \u0000; text and jsonb refuse it) and
// a UTF-16 surrogate escape without its pair (jsonb refuses it). Both
// stores apply it, so memstore and pg agree, and the HTTP layer applies it
// to request bodies, so such input is a 400, not a 500. Returns an error
// wrapping ErrInvalid.
func CheckJSONText(b []byte) error {
	if bytes.IndexByte(b, 0) < 0 && bytes.IndexByte(b, '\\') < 0 {
		return nil // the common text, found in two vectorised scans
	}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case 0:
			return fmt.Errorf("text must not contain NUL characters: %w", ErrInvalid)
		case '\\': // only inside strings in valid JSON
			if i+1 < len(b) && b[i+1] != 'u' {
				i++ // an escaped character, \\ included
				continue
			}
			r, ok := hex4(b, i+2)
			if !ok {
				continue // malformed: json.Valid says so
			}
			switch {
			case r == 0:
				return fmt.Errorf("text must not contain NUL characters: %w", ErrInvalid)
			case r >= 0xD800 && r <= 0xDBFF:
				if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
					if low, ok := hex4(b, i+8); ok && low >= 0xDC00 && low <= 0xDFFF {
						i += 11
						continue
					}
				}
				return fmt.Errorf("text holds an unpaired UTF-16 surrogate: %w", ErrInvalid)
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf("text holds an unpaired UTF-16 surrogate: %w", ErrInvalid)
			}
			i += 5
		}
	}
	return nil
}

// hex4 reads the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
