package sessionlog

import (
	"encoding/json"
	"flag"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"
	"time"

	"github.com/subagentd/subagentd/internal/model"
)

// FuzzFixedShape: the payloads that encode themselves write what
// json.Marshal writes, whatever their strings and numbers, and fail where
// it fails (a Raw content block that is not JSON).
func FuzzFixedShape(f *testing.F) {
	f.Add(1, 2, "text", "echo: ", "", "", "", 0, 0, "")
	f.Add(0, -3, "tool-call", "", "call_1_1_1", "read", `{"path":"<a&b>"}`, 0, 0, "")
	f.Add(7, 1, "usage", "", "", "", "", 5, 12, "")
	f.Add(2, 9, "finish", "\u2028 \"q\" \\ \x00 \xff", "", "", "", -1, 1<<40, "stop")
	f.Add(1, 1, "text", "x", "id", "n", `{"type":"image",  "data":"\u2028"}`, 0, 0, "")
	f.Add(1, 1, "text", "x", "id", "n", `{"type":`, 0, 0, "")
	f.Fuzz(func(t *testing.T, turn, step int, typ, text, callID, name, args string, in, out int, finish string) {
		cause := &Cause{Kind: name}
		if callID == "" {
			cause = nil
		}
		var content []model.Block // nil, then text, then text and raw
		switch {
		case args != "":
			content = []model.Block{model.TextBlock(text), {Type: typ, Raw: json.RawMessage(args)}}
		case text != "":
			content = []model.Block{model.TextBlock(text)}
		}
		msg := UserMessage{ID: callID, Role: "user", Content: content,
			Source: Source{Kind: typ, Form: name, Summary: text, SenderSessionID: callID, Label: finish}}
		var usage *UsageData
		if in != 0 {
			usage = &UsageData{InputTokens: in, OutputTokens: out}
		}
		var inserted []UserMessage // nil, empty, or msg twice
		switch {
		case step > 0:
			inserted = []UserMessage{msg, msg}
		case step == 0:
			inserted = []UserMessage{}
		}
		for _, p := range []fixedShape{
			TurnData{Turn: turn},
			StepData{Turn: turn, Step: step},
			ChunkData{Turn: turn, Step: step, Chunk: Chunk{Type: typ, Text: text, CallID: callID, Name: name,
				Arguments: args, InputTokens: in, OutputTokens: out, FinishReason: finish}},
			TurnEndData{Turn: turn, Reason: TurnReason{Kind: typ, Cause: cause, Message: text, Code: finish}},
			msg,
			InboxSplicedData{Target: typ, Start: turn, RemovedCount: out, Inserted: inserted, Outcome: name},
			AssistantMessageData{Turn: turn, Step: step, Message: AssistantMessage{Role: name, Content: content},
				Usage: usage, Interrupted: out > 0},
		} {
			want, wantErr := json.Marshal(p)
			got, err := p.appendJSON([]byte("x"))
			switch {
			case (err != nil) != (wantErr != nil):
				t.Fatalf("%T appendJSON error %v, json.Marshal error %v", p, err, wantErr)
			case err == nil && string(got) != "x"+string(want):
				t.Fatalf("%T appendJSON = %s, json.Marshal %s", p, got[1:], want)
			}
		}
	})
}

// BenchmarkEncode is Encode of the events one echo run's step logs.
func BenchmarkEncode(b *testing.B) {
	pairs := []any{
		EventTurnStart, TurnData{Turn: 1},
		EventStepStart, StepData{Turn: 1, Step: 1},
		EventAssistantChunk, ChunkData{Turn: 1, Step: 1, Chunk: Chunk{Type: string(model.ChunkText), Text: "echo: "}},
		EventAssistantChunk, ChunkData{Turn: 1, Step: 1, Chunk: Chunk{Type: string(model.ChunkUsage), InputTokens: 4, OutputTokens: 5}},
		EventAssistantMessage, AssistantMessageData{Turn: 1, Step: 1, Message: AssistantMessage{Role: "assistant",
			Content: []model.Block{model.TextBlock("echo: hello from the bench")}}, Usage: &UsageData{InputTokens: 4, OutputTokens: 5}},
		EventStepEnd, StepData{Turn: 1, Step: 1},
		EventTurnEnd, TurnEndData{Turn: 1, Reason: TurnReason{Kind: ReasonCompleted}},
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := 0; i < len(pairs); i += 2 {
			if _, err := Encode(pairs[i].(string), pairs[i+1]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// FuzzOneShotDescriptor: a one-shot descriptor encodes to what
// json.Marshal writes for its payload.
func FuzzOneShotDescriptor(f *testing.F) {
	f.Add("spawn", "")
	f.Add("a2a", "<label> & \"more\" \u2028 \xff")
	f.Fuzz(func(t *testing.T, provider, label string) {
		p := descriptorJSON{Version: DescriptorVersion, Mode: ModeOneShot, Provider: provider}
		if label != "" {
			p.Label = &label
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := EncodeDescriptor(Descriptor{Mode: ModeOneShot, Provider: provider, Label: label})
		if err != nil || string(got) != string(want) {
			t.Fatalf("EncodeDescriptor = %s, %v; json.Marshal %s", got, err, want)
		}
	})
}

var seedFlag = flag.Int64("seed", 0, "seed of TestFixedShapeEveryField (0: a fresh one, printed)")

// TestFixedShapeEveryField fills every field of each payload that encodes
// itself with random values (testing/quick) and compares the encoding with
// json.Marshal's: a field added to one of these types and left out of its
// appendJSON fails here. Raw content blocks are left empty (random bytes
// are not JSON, which FuzzFixedShape covers).
func TestFixedShapeEveryField(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("replay: go test ./internal/sessionlog -run TestFixedShapeEveryField -seed %d", seed)
	rnd := rand.New(rand.NewSource(seed))
	for _, p := range []fixedShape{TurnData{}, StepData{}, ChunkData{}, TurnEndData{}, UserMessage{}, InboxSplicedData{}, AssistantMessageData{}} {
		typ := reflect.TypeOf(p)
		for range 200 {
			v, ok := quick.Value(typ, rnd)
			if !ok {
				t.Fatalf("quick cannot make a %s", typ)
			}
			clearRaw(v)
			want, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatalf("json.Marshal(%s): %v", typ, err)
			}
			got, err := v.Interface().(fixedShape).appendJSON(nil)
			if err != nil || string(got) != string(want) {
				t.Fatalf("%s appendJSON = %s, %v; json.Marshal %s", typ, got, err, want)
			}
		}
	}
}

// clearRaw empties every json.RawMessage v holds, through structs, slices
// and pointers.
func clearRaw(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			clearRaw(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			clearRaw(v.Field(i))
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetZero()
			return
		}
		for i := range v.Len() {
			clearRaw(v.Index(i))
		}
	}
}
