package sessionlog

import (
	"strconv"

	"github.com/subagentd/subagentd/internal/jsonstr"
)

// fixedShape is a payload that appends its own JSON, byte for byte what
// json.Marshal writes for it, without reflection: the fixed-shape payloads
// every turn logs (turn/start, step/start and step/end, each
// assistant/chunk, turn/end), 11 of the 15 an echo run encodes.
type fixedShape interface {
	appendJSON(b []byte) []byte
}

var (
	_ fixedShape = TurnData{}
	_ fixedShape = StepData{}
	_ fixedShape = ChunkData{}
	_ fixedShape = TurnEndData{}
)

func (d TurnData) appendJSON(b []byte) []byte {
	b = append(b, `{"turn":`...)
	b = strconv.AppendInt(b, int64(d.Turn), 10)
	return append(b, '}')
}

func (d StepData) appendJSON(b []byte) []byte {
	return append(appendTurnStep(b, d.Turn, d.Step), '}')
}

func (d ChunkData) appendJSON(b []byte) []byte {
	b = appendTurnStep(b, d.Turn, d.Step)
	b = append(b, `,"chunk":{"type":`...)
	c := d.Chunk
	b = jsonstr.Append(b, c.Type)
	b = appendOptString(b, "text", c.Text)
	b = appendOptString(b, "callId", c.CallID)
	b = appendOptString(b, "name", c.Name)
	b = appendOptString(b, "arguments", c.Arguments)
	b = appendOptInt(b, "inputTokens", c.InputTokens)
	b = appendOptInt(b, "outputTokens", c.OutputTokens)
	b = appendOptString(b, "finishReason", c.FinishReason)
	return append(b, '}', '}')
}

func (d TurnEndData) appendJSON(b []byte) []byte {
	b = append(b, `{"turn":`...)
	b = strconv.AppendInt(b, int64(d.Turn), 10)
	b = append(b, `,"reason":{"kind":`...)
	r := d.Reason
	b = jsonstr.Append(b, r.Kind)
	if r.Cause != nil {
		b = append(b, `,"reason":{"kind":`...)
		b = jsonstr.Append(b, r.Cause.Kind)
		b = append(b, '}')
	}
	b = appendOptString(b, "message", r.Message)
	b = appendOptString(b, "code", r.Code)
	return append(b, '}', '}')
}

// appendTurnStep opens a step's payload: {"turn":…,"step":…
func appendTurnStep(b []byte, turn, step int) []byte {
	b = append(b, `{"turn":`...)
	b = strconv.AppendInt(b, int64(turn), 10)
	b = append(b, `,"step":`...)
	return strconv.AppendInt(b, int64(step), 10)
}

// appendOptString appends ,"name":v unless v is empty (omitempty).
func appendOptString(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return jsonstr.Append(appendName(b, name), v)
}

// appendOptInt appends ,"name":v unless v is 0 (omitempty).
func appendOptInt(b []byte, name string, v int) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(appendName(b, name), int64(v), 10)
}

// appendName appends ,"name": after a field of the object b holds.
func appendName(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}
