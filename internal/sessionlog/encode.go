package sessionlog

import (
	"strconv"

	"github.com/subagentd/subagentd/internal/jsonstr"
	"github.com/subagentd/subagentd/internal/model"
)

// fixedShape is a payload that appends its own JSON, byte for byte what
// json.Marshal writes for it, without reflection: the payloads every turn
// logs (turn/start, the inbox splices, user/message, step/start and
// step/end, each assistant/chunk, assistant/message, turn/end), all 15 an
// echo run encodes. It fails where json.Marshal fails: on a content block
// whose Raw is not JSON.
type fixedShape interface {
	appendJSON(b []byte) ([]byte, error)
}

var (
	_ fixedShape = TurnData{}
	_ fixedShape = StepData{}
	_ fixedShape = ChunkData{}
	_ fixedShape = TurnEndData{}
	_ fixedShape = UserMessage{}
	_ fixedShape = InboxSplicedData{}
	_ fixedShape = AssistantMessageData{}
)

func (d TurnData) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"turn":`...)
	b = strconv.AppendInt(b, int64(d.Turn), 10)
	return append(b, '}'), nil
}

func (d StepData) appendJSON(b []byte) ([]byte, error) {
	return append(appendTurnStep(b, d.Turn, d.Step), '}'), nil
}

func (d ChunkData) appendJSON(b []byte) ([]byte, error) {
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
	return append(b, '}', '}'), nil
}

func (d TurnEndData) appendJSON(b []byte) ([]byte, error) {
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
	return append(b, '}', '}'), nil
}

func (m UserMessage) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, m.ID)
	b = append(b, `,"role":`...)
	b = jsonstr.Append(b, m.Role)
	b, err := appendBlocks(append(b, `,"content":`...), m.Content)
	if err != nil {
		return nil, err
	}
	src := m.Source
	b = append(b, `,"source":{"kind":`...)
	b = jsonstr.Append(b, src.Kind)
	b = appendOptString(b, "form", src.Form)
	b = appendOptString(b, "summary", src.Summary)
	b = appendOptString(b, "senderSessionId", src.SenderSessionID)
	b = appendOptString(b, "label", src.Label)
	return append(b, '}', '}'), nil
}

func (d InboxSplicedData) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"target":`...)
	b = jsonstr.Append(b, d.Target)
	b = append(b, `,"start":`...)
	b = strconv.AppendInt(b, int64(d.Start), 10)
	b = appendOptInt(b, "removedCount", d.RemovedCount)
	b = append(b, `,"inserted":`...)
	if d.Inserted == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range d.Inserted {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = m.appendJSON(b); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	b = appendOptString(b, "outcome", d.Outcome)
	return append(b, '}'), nil
}

func (d AssistantMessageData) appendJSON(b []byte) ([]byte, error) {
	b = appendTurnStep(b, d.Turn, d.Step)
	b = append(b, `,"message":{"role":`...)
	b = jsonstr.Append(b, d.Message.Role)
	b, err := appendBlocks(append(b, `,"content":`...), d.Message.Content)
	if err != nil {
		return nil, err
	}
	b = append(b, '}')
	if u := d.Usage; u != nil {
		b = append(b, `,"usage":{"inputTokens":`...)
		b = strconv.AppendInt(b, int64(u.InputTokens), 10)
		b = append(b, `,"outputTokens":`...)
		b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
		b = append(b, '}')
	}
	if d.Interrupted {
		b = append(b, `,"interrupted":true`...)
	}
	return append(b, '}'), nil
}

// appendBlocks appends content as json.Marshal writes it
// (model.MarshalBlocks).
func appendBlocks(b []byte, content []model.Block) ([]byte, error) {
	enc, err := model.MarshalBlocks(content)
	if err != nil {
		return nil, err
	}
	return append(b, enc...), nil
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
