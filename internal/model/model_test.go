package model

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// blockInputs are block objects the fast decoding path takes and ones it
// must leave to encoding/json.
var blockInputs = []string{
	`{"type":"text","text":"hello"}`,
	`{"text":"hello from the bench","type":"text"}`,
	`{"type":"text","text":""}`,
	`{"type":"image","text":"ünïcödé ok"}`,
	`{"type":"","text":"x"}`,
	`{"type":"text","text":"a\"b"}`,
	`{"type":"text","text":"a\nb \u003c"}`,
	`{"type":"text","text":"tab	inside"}`,
	"{\"type\":\"text\",\"text\":\"bad \xff utf8\"}",
	`{"type": "text", "text": "spaced"}`,
	`{"TYPE":"text","text":"case"}`,
	`{"type":"text","text":"x","extra":1}`,
	`{"type":"text","text":"x","type":"image"}`,
	`{"type":"tool-call","id":"c1"}`,
	`{"text":"no type"}`,
	`{"type":"text"}`,
	`{"type":5,"text":"x"}`,
	`{"type":"text","text":null}`,
	`[]`,
}

// TestBlockUnmarshal_FastPathMatchesEncodingJSON: whatever the fast path
// decodes, the general path (encoding/json) decodes the same way.
func TestBlockUnmarshal_FastPathMatchesEncodingJSON(t *testing.T) {
	fast := 0
	for _, in := range blockInputs {
		checkUnmarshal(t, []byte(in))
		if _, _, ok := plainText([]byte(in)); ok {
			fast++
		}
	}
	if fast != 4 {
		t.Errorf("the fast path took %d inputs, want 4", fast)
	}
}

func checkUnmarshal(t *testing.T, data []byte) {
	t.Helper()
	var got, want Block
	gotErr := got.UnmarshalJSON(data)
	wantErr := want.unmarshalObject(data)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("%q: error %v, encoding/json %v", data, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
	}
}

// TestMarshalBlocks_MatchesEncodingJSON: MarshalBlocks and Block's
// MarshalJSON write what json.Marshal wrote with the reflective encoder.
func TestMarshalBlocks_MatchesEncodingJSON(t *testing.T) {
	lists := [][]Block{
		nil,
		{},
		{TextBlock("hello")},
		{TextBlock(`<b> & "quotes" \ ` + "\n\t\u2028 \xff é")},
		{{Type: "text", Text: "x", Raw: json.RawMessage(`{ "type" : "text", "text" : "x <y>" }`)}, TextBlock("")},
		{{Type: "image", Raw: json.RawMessage(`{"type":"image","url":"a&b"}`)}},
	}
	for _, blocks := range lists {
		checkMarshal(t, blocks)
	}
	if _, err := MarshalBlocks([]Block{{Type: "x", Raw: json.RawMessage(`{"type":`)}}); err == nil {
		t.Error("MarshalBlocks accepted a Raw that is not JSON")
	}
}

func checkMarshal(t *testing.T, blocks []Block) {
	t.Helper()
	got, err := MarshalBlocks(blocks)
	if err != nil {
		t.Fatal(err)
	}
	// The reference: encoding/json over the same blocks, each written as
	// the struct the text path stands for.
	type textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	ref := make([]any, len(blocks))
	for i, b := range blocks {
		ref[i] = textBlock{b.Type, b.Text}
		if len(b.Raw) > 0 {
			ref[i] = b.Raw
		}
	}
	var want []byte
	if blocks == nil {
		want = []byte("null")
	} else if want, err = json.Marshal(ref); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("MarshalBlocks = %s, encoding/json %s", got, want)
	}
	viaMarshaler, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(viaMarshaler, want) {
		t.Fatalf("json.Marshal(blocks) = %s, encoding/json %s", viaMarshaler, want)
	}
}

// FuzzBlockJSON checks both directions against encoding/json on arbitrary
// texts and objects.
func FuzzBlockJSON(f *testing.F) {
	for _, in := range blockInputs {
		f.Add(in, "text")
	}
	f.Fuzz(func(t *testing.T, s, typ string) {
		if json.Valid([]byte(s)) {
			checkUnmarshal(t, []byte(s))
		}
		if typ != "" {
			checkMarshal(t, []Block{{Type: typ, Text: s}})
			data, err := json.Marshal(Block{Type: typ, Text: s})
			if err != nil {
				t.Fatal(err)
			}
			checkUnmarshal(t, data)
		}
	})
}
