// Package sessionlog is the session log as a typed vocabulary: the event
// types every writer uses (the agent, the seam, the providers), their
// payload structs with their one encoding, and every fold a reader needs
// over a log — model history, output selection, consumed work, the
// descriptor folds, the messages a log holds and the last task. It holds
// domain types only: storage is store.Store's, transport is internal/http's.
//
// The vocabulary is open (docs/seam.md §1): folds skip event types they do
// not know and payloads they cannot decode.
package sessionlog

import (
	"encoding/json"
	"fmt"

	"github.com/subagentd/subagentd/internal/store"
)

// Entry is an event to append with, when its writer has it, the payload
// its data was encoded from: folds fed at write time (History.Fold,
// OutcomeFold.Fold) then read the payload instead of decoding the data.
type Entry struct {
	store.NewEvent
	Payload any // nil when the writer has only the encoded data
}

// Encode returns the entry of type typ carrying payload, one of this
// package's payload types. It fails only when payload does not marshal (a
// content block holding invalid raw JSON).
func Encode(typ string, payload any) (Entry, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Entry{}, fmt.Errorf("encode %s payload: %w", typ, err)
	}
	return Entry{NewEvent: store.NewEvent{Type: typ, Data: raw, Marshaled: true}, Payload: payload}, nil
}

// Decode reads the payload of e as a T. It returns the JSON error of a
// payload that does not decode; folds skip such events.
func Decode[T any](e store.Event) (T, error) {
	var d T
	err := json.Unmarshal(e.Data, &d)
	return d, err
}
