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
// content block holding invalid raw JSON). The payloads of every turn
// encode themselves (fixedShape); the others go through json.Marshal.
func Encode(typ string, payload any) (Entry, error) {
	var raw []byte
	var err error
	if p, ok := payload.(fixedShape); ok {
		raw, err = p.appendJSON(make([]byte, 0, 128))
	} else {
		raw, err = json.Marshal(payload)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("encode %s payload: %w", typ, err)
	}
	return Entry{NewEvent: store.NewEvent{Type: typ, Data: raw, Marshaled: true, Usage: usageOf(typ, payload)}, Payload: payload}, nil
}

// usageOf is the model usage an event records, which the store adds to the
// session's running sum: a step's start is one model call, a step's
// assistant/message the tokens that call reported, when it reported them.
func usageOf(typ string, payload any) store.Usage {
	switch typ {
	case EventStepStart:
		return store.Usage{ModelCalls: 1}
	case EventAssistantMessage:
		var u *UsageData
		switch d := payload.(type) {
		case AssistantMessageData:
			u = d.Usage
		case *AssistantMessageData:
			u = d.Usage
		}
		if u != nil {
			return store.Usage{InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens), Reported: 1}
		}
	}
	return store.Usage{}
}

// UsageOf is the model usage events record, decoded from their data: what
// the store's running sums and settled runs add up, for a reader that holds
// a log (a test, a check) rather than the sums.
func UsageOf(events []store.Event) store.Usage {
	var u store.Usage
	for _, e := range events {
		switch e.Type {
		case EventStepStart:
			u.ModelCalls++
		case EventAssistantMessage:
			if d, err := Decode[AssistantMessageData](e); err == nil && d.Usage != nil {
				u = u.Add(store.Usage{InputTokens: int64(d.Usage.InputTokens), OutputTokens: int64(d.Usage.OutputTokens), Reported: 1})
			}
		}
	}
	return u
}

// Decode reads the payload of e as a T. It returns the JSON error of a
// payload that does not decode; folds skip such events.
func Decode[T any](e store.Event) (T, error) {
	var d T
	err := json.Unmarshal(e.Data, &d)
	return d, err
}
