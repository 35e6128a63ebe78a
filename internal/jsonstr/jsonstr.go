// Package jsonstr reads and writes JSON strings without reflection, byte
// for byte as encoding/json does, for the hand-written encoders and
// decoders of the hot path (a run's lifecycle payloads, content blocks),
// whose results must not differ from encoding/json's.
package jsonstr

import (
	"encoding/json"
	"unicode/utf8"
)

// Append appends s to dst as a JSON string, exactly as json.Marshal(s)
// writes it: HTML characters, control characters, U+2028 and U+2029
// escaped, invalid UTF-8 replaced by U+FFFD. Printable ASCII without '"',
// '\\', '<', '>' and '&' is copied as it is; any other string goes
// through json.Marshal, so the two never differ.
func Append(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always marshals
			return append(dst, enc...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// Plain reports whether data, the bytes of a JSON string between its
// quotes, decode to themselves: no escape, no control character, valid
// UTF-8 (json.Unmarshal replaces invalid bytes with U+FFFD). string(data)
// is then what json.Unmarshal would decode.
func Plain(data []byte) bool {
	for _, c := range data {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(data)
}
