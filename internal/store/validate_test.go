package store

import (
	"errors"
	"testing"
)

func TestCheckJSONText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{`{"a":"plain"}`, true},
		{`{"a":"pair \ud83d\ude00"}`, true},
		{`{"a":"escaped backslash \\u0000 is text"}`, true},
		{`{"a":"quote \" and \n"}`, true},
		{`{"a":"nul \u0000"}`, false},
		{"{\"a\":\"raw \x00\"}", false},
		{`{"a":"lone high \ud800"}`, false},
		{`{"a":"lone high then text \ud800x"}`, false},
		{`{"a":"high then high \ud800\ud800"}`, false},
		{`{"a":"lone low \udc00"}`, false},
		{`{"a":"upper hex \uDBFF\uDFFF"}`, true},
	} {
		err := CheckJSONText([]byte(tc.text))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("CheckJSONText(%s) = %v, want ok %v", tc.text, err, tc.ok)
		}
	}
}

func TestCheckEvents_MarshaledSkipsOnlyTheParse(t *testing.T) {
	t.Parallel()
	big := make([]byte, MaxEventBytes+1)
	for i := range big {
		big[i] = ' '
	}
	for _, tc := range []struct {
		name string
		ev   NewEvent
		ok   bool
	}{
		{"unparsed, trusted", NewEvent{Type: "t", Data: []byte(`{"a":1}`), Marshaled: true}, true},
		{"not JSON, untrusted", NewEvent{Type: "t", Data: []byte(`{bad`)}, false},
		{"NUL, trusted", NewEvent{Type: "t", Data: []byte(`{"a":"\u0000"}`), Marshaled: true}, false},
		{"oversized, trusted", NewEvent{Type: "t", Data: big, Marshaled: true}, false},
		{"no type, trusted", NewEvent{Data: []byte(`{}`), Marshaled: true}, false},
	} {
		err := CheckEvents([]NewEvent{tc.ev})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: CheckEvents = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// BenchmarkCheckJSONText is the check of a typical event's data: an
// assistant/message of one text block, without escapes.
func BenchmarkCheckJSONText(b *testing.B) {
	data := []byte(`{"turn":1,"step":1,"message":{"role":"assistant","content":[{"type":"text","text":"echo: hello from the bench, with a few more words to make it a sentence"}]},"usage":{"inputTokens":4,"outputTokens":5}}`)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := CheckJSONText(data); err != nil {
			b.Fatal(err)
		}
	}
}
